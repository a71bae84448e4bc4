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
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
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
		snprintf(out, len, "%s:%u", host, ntohs(((const struct sockaddr_in *)sa)->sin_port));
	else
		snprintf(out, len, "%s", host);
	return out;
}
