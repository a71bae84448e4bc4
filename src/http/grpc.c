/*
 * grpc.c - gRPC's status codes, messages and timeouts (see grpc.h).
 */
#include "http/grpc.h"

#include <string.h>
#include <strings.h>

/* Does v[0..len) begin with the media type <type> (any case), followed by its end, a
 * "+suffix", or parameters (';', whitespace before it allowed)? */
static int type_is(const char *v, size_t len, const char *type)
{
	size_t n = strlen(type);
	if (len < n || strncasecmp(v, type, n) != 0)
		return 0;
	if (len == n || v[n] == '+' || v[n] == ';')
		return 1;
	while (n < len && (v[n] == ' ' || v[n] == '\t'))
		n++;
	return n < len && v[n] == ';';
}

int http_grpc_is(const char *v, size_t len)
{
	return type_is(v, len, "application/grpc");
}

enum http_grpc_web http_grpc_web_kind(const char *v, size_t len, size_t *rest)
{
	if (type_is(v, len, "application/grpc-web")) {
		*rest = 20;
		return HTTP_GRPC_WEB_BINARY;
	}
	if (type_is(v, len, "application/grpc-web-text")) {
		*rest = 25;
		return HTTP_GRPC_WEB_TEXT;
	}
	return HTTP_GRPC_WEB_NONE;
}

int http_grpc_to_http(int code)
{
	switch (code) {
	case 3:	 /* INVALID_ARGUMENT */
	case 9:	 /* FAILED_PRECONDITION */
	case 11: /* OUT_OF_RANGE */
		return 400;
	case 16: /* UNAUTHENTICATED */
		return 401;
	case 7: /* PERMISSION_DENIED */
		return 403;
	case 5: /* NOT_FOUND */
		return 404;
	case 8: /* RESOURCE_EXHAUSTED */
		return 429;
	case 12: /* UNIMPLEMENTED */
		return 501;
	case 14: /* UNAVAILABLE */
		return 503;
	case 4: /* DEADLINE_EXCEEDED */
		return 504;
	default: /* CANCELLED, UNKNOWN, ABORTED, INTERNAL, DATA_LOSS, and codes past 16 */
		return 500;
	}
}

int http_grpc_status(int status)
{
	switch (status) {
	case 400:
		return 13; /* INTERNAL, as gRPC maps it */
	case 401:
		return 16; /* UNAUTHENTICATED */
	case 403:
		return 7; /* PERMISSION_DENIED */
	case 404:
	case 405:
	case 501:
		return 12; /* UNIMPLEMENTED */
	case 408:
	case 504:
		return 4; /* DEADLINE_EXCEEDED */
	case 413:
	case 414:
	case 429:
	case 431:
		return 8; /* RESOURCE_EXHAUSTED */
	case 502:
	case 503:
		return 14; /* UNAVAILABLE */
	case 500:
		return 13;
	default:
		return 2; /* UNKNOWN */
	}
}

size_t http_grpc_message(char *out, size_t cap, const char *text)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		int plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
		if (n + (plain ? 1 : 3) > cap)
			break;
		if (plain) {
			out[n++] = (char)*p;
			continue;
		}
		out[n++] = '%';
		out[n++] = hex[*p >> 4];
		out[n++] = hex[*p & 15];
	}
	return n;
}

int http_grpc_timeout_ms(const char *v, size_t len, uint64_t *ms)
{
	if (len < 2 || len > 9)
		return -1;
	uint64_t n = 0;
	for (size_t i = 0; i + 1 < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		n = n * 10 + (uint64_t)(v[i] - '0');
	}
	switch (v[len - 1]) {
	case 'H':
		*ms = n * 3600000;
		return 0;
	case 'M':
		*ms = n * 60000;
		return 0;
	case 'S':
		*ms = n * 1000;
		return 0;
	case 'm':
		*ms = n;
		return 0;
	case 'u':
		*ms = (n + 999) / 1000;
		return 0;
	case 'n':
		*ms = (n + 999999) / 1000000;
		return 0;
	default:
		return -1;
	}
}
