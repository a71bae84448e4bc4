/*
 * addr.c - parsing and printing of socket addresses.
 *
 * Host names are resolved once, at configuration time, with getaddrinfo(); the request path
 * never resolves anything.
 */
#include "net/addr.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int net_addr_parse(const char *text, struct net_addr *out, const char **why)
{
	char host[256];
	const char *colon, *port;
	size_t hlen;

	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close || close[1] != ':') {
			*why = "expected [IPV6]:PORT";
			return -EINVAL;
		}
		hlen = (size_t)(close - text - 1);
		memcpy(host, text + 1, hlen < sizeof(host) ? hlen : 0);
		port = close + 2;
	} else {
		colon = strrchr(text, ':');
		if (!colon || colon == text) {
			*why = "expected HOST:PORT";
			return -EINVAL;
		}
		hlen = (size_t)(colon - text);
		port = colon + 1;
		if (hlen >= sizeof(host)) {
			*why = "host name too long";
			return -EINVAL;
		}
		memcpy(host, text, hlen);
	}
	if (hlen >= sizeof(host)) {
		*why = "host name too long";
		return -EINVAL;
	}
	host[hlen] = '\0';
	char *end;
	long p = strtol(port, &end, 10);
	if (!*port || *end || p < 1 || p > 65535) {
		*why = "port must be a number from 1 to 65535";
		return -EINVAL;
	}

	memset(out, 0, sizeof(*out));
	if (strcmp(host, "*") == 0) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)p);
		sin->sin_addr.s_addr = htonl(INADDR_ANY);
		out->len = sizeof(*sin);
		return 0;
	}
	struct addrinfo hints = {
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, port, &hints, &res) != 0 || !res) {
		*why = "cannot resolve host";
		return -EINVAL;
	}
	memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
	out->len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

char *net_addr_host(const struct sockaddr *sa, char *out, size_t len)
{
	if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
			  (socklen_t)len);
	else if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
			  (socklen_t)len);
	else
		snprintf(out, len, "unknown");
	return out;
}

char *net_addr_format(const struct sockaddr *sa, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN];
	net_addr_host(sa, host, sizeof(host));
	if (sa->sa_family == AF_INET6)
		snprintf(out, len, "[%s]:%u", host,
			 ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
	else if (sa->sa_family == AF_INET)
		snprintf(out, len, "%s:%u", host,
			 ntohs(((const struct sockaddr_in *)sa)->sin_port));
	else
		snprintf(out, len, "%s", host);
	return out;
}

int net_cidr_parse(const char *text, struct net_cidr *out, const char **why)
{
	char host[INET6_ADDRSTRLEN];
	const char *slash = strchr(text, '/');
	size_t hlen = slash ? (size_t)(slash - text) : strlen(text);
	if (!hlen || hlen >= sizeof(host)) {
		*why = "expected an address block such as 10.0.0.0/8 or fd00::/8";
		return -EINVAL;
	}
	memcpy(host, text, hlen);
	host[hlen] = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, host, out->addr) == 1) {
		out->family = AF_INET;
		out->bits = 32;
	} else if (inet_pton(AF_INET6, host, out->addr) == 1) {
		out->family = AF_INET6;
		out->bits = 128;
	} else {
		*why = "expected an IPv4 or IPv6 address before the '/'";
		return -EINVAL;
	}
	if (slash) {
		char *end;
		unsigned long bits = strtoul(slash + 1, &end, 10);
		if (end == slash + 1 || *end || bits > out->bits) {
			*why = out->family == AF_INET ? "the prefix length must be 0 to 32"
						      : "the prefix length must be 0 to 128";
			return -EINVAL;
		}
		out->bits = (unsigned)bits;
	}
	return 0;
}

/* Do the first <bits> bits of a and b agree? */
static int prefix_eq(const unsigned char *a, const unsigned char *b, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;
	if (memcmp(a, b, whole) != 0)
		return 0;
	if (!rest)
		return 1;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));
	return (a[whole] & mask) == (b[whole] & mask);
}

int net_cidr_match(const struct net_cidr *cidrs, size_t n, const struct sockaddr *sa)
{
	const unsigned char *v4 = NULL, *v6 = NULL;
	if (sa->sa_family == AF_INET) {
		v4 = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		v6 = a->s6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a))
			v4 = a->s6_addr + 12;
	}
	for (size_t i = 0; i < n; i++) {
		const struct net_cidr *c = &cidrs[i];
		if (c->family == AF_INET && v4 && prefix_eq(c->addr, v4, c->bits))
			return 1;
		if (c->family == AF_INET6 && v6 && prefix_eq(c->addr, v6, c->bits))
			return 1;
	}
	return 0;
}

int net_addr_same(const struct net_addr *x, const struct net_addr *y)
{
	if (x->ss.ss_family != y->ss.ss_family)
		return 0;
	if (x->ss.ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)&x->ss, *b = (const void *)&y->ss;
		return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *a = (const void *)&x->ss, *b = (const void *)&y->ss;
	return a->sin6_port == b->sin6_port &&
	       !memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) &&
	       a->sin6_scope_id == b->sin6_scope_id;
}

int net_addr_parse_numeric(const char *text, struct net_addr *out, const char **why)
{
	char host[INET6_ADDRSTRLEN];
	const char *port;
	size_t hlen;
	int v6 = text[0] == '[';
	memset(out, 0, sizeof(*out));
	if (v6) {
		const char *close = strchr(text, ']');
		if (!close || close[1] != ':') {
			*why = "expected [IPV6]:PORT";
			return -EINVAL;
		}
		hlen = (size_t)(close - text - 1);
		text++;
		port = close + 2;
	} else {
		const char *colon = strrchr(text, ':');
		if (!colon) {
			*why = "expected IP:PORT, e.g. 10.0.0.7:8000";
			return -EINVAL;
		}
		hlen = (size_t)(colon - text);
		port = colon + 1;
	}
	if (!hlen || hlen >= sizeof(host)) {
		*why = "expected a numeric IP address (a name is not resolved here)";
		return -EINVAL;
	}
	memcpy(host, text, hlen);
	host[hlen] = '\0';
	unsigned long p = 0;
	size_t digits = 0;
	for (; port[digits] >= '0' && port[digits] <= '9' && digits < 6; digits++)
		p = p * 10 + (unsigned long)(port[digits] - '0');
	if (!digits || port[digits] || p < 1 || p > 65535) {
		*why = "the port must be a number from 1 to 65535";
		return -EINVAL;
	}
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out->ss;
		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1) {
			*why = "not an IPv6 address";
			return -EINVAL;
		}
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)p);
		out->len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&out->ss;
		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) {
			*why = "expected a numeric IP address (a name is not resolved here)";
			return -EINVAL;
		}
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)p);
		out->len = sizeof(*s4);
	}
	return 0;
}
