/*
 * proxyproto.c - the PROXY protocol header writer (see proxyproto.h). Addresses are taken as
 * the kernel gave them (getpeername, getsockname), so nothing here parses or trusts a peer's
 * bytes; the v1 line is built with inet_ntop's text, which never exceeds its bounds.
 */
#include "net/proxyproto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char v2_sig[12] = "\r\n\r\n\0\r\nQUIT\n";

/* The family both ends share, as the header names it: AF_INET (a mapped IPv6 address counts
 * as IPv4), AF_INET6, or AF_UNSPEC; the addresses and ports, in network order. */
struct ends {
	int family;
	uint8_t addr[2][16];
	uint16_t port[2]; /* network order */
};

static int end_of(const struct sockaddr *sa, uint8_t addr[16], uint16_t *port)
{
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		memcpy(addr, &in->sin_addr, 4);
		*port = in->sin_port;
		return AF_INET;
	}
	if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		*port = in6->sin6_port;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			memcpy(addr, in6->sin6_addr.s6_addr + 12, 4);
			return AF_INET;
		}
		memcpy(addr, &in6->sin6_addr, 16);
		return AF_INET6;
	}
	return AF_UNSPEC;
}

static void ends_of(struct ends *e, const struct sockaddr *src, const struct sockaddr *dst)
{
	int a = end_of(src, e->addr[0], &e->port[0]);
	int b = end_of(dst, e->addr[1], &e->port[1]);
	e->family = a == b ? a : AF_UNSPEC;
}

static int write_v1(const struct ends *e, char *out, size_t len)
{
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
	int n;
	if (e->family == AF_UNSPEC) {
		n = snprintf(out, len, "PROXY UNKNOWN\r\n");
	} else {
		inet_ntop(e->family, e->addr[0], s, sizeof(s));
		inet_ntop(e->family, e->addr[1], d, sizeof(d));
		n = snprintf(out, len, "PROXY %s %s %s %u %u\r\n",
			     e->family == AF_INET ? "TCP4" : "TCP6", s, d, ntohs(e->port[0]),
			     ntohs(e->port[1]));
	}
	return n < 0 || (size_t)n >= len ? -EINVAL : n;
}

static int write_v2(const struct ends *e, char *out, size_t len)
{
	size_t alen = e->family == AF_INET ? 4 : e->family == AF_INET6 ? 16 : 0;
	size_t body = alen ? 2 * alen + 4 : 0;
	if (len < 16 + body)
		return -EINVAL;
	memcpy(out, v2_sig, 12);
	out[12] = alen ? 0x21 : 0x20;			       /* version 2; PROXY, or LOCAL */
	out[13] = alen == 4 ? 0x11 : alen == 16 ? 0x21 : 0x00; /* TCP over IPv4 / IPv6 */
	out[14] = (char)(body >> 8);
	out[15] = (char)(body & 0xff);
	if (alen) {
		memcpy(out + 16, e->addr[0], alen);
		memcpy(out + 16 + alen, e->addr[1], alen);
		memcpy(out + 16 + 2 * alen, &e->port[0], 2);
		memcpy(out + 18 + 2 * alen, &e->port[1], 2);
	}
	return (int)(16 + body);
}

int net_proxyproto_write(int version, const struct sockaddr *src, const struct sockaddr *dst,
			 char *out, size_t len)
{
	struct ends e;
	ends_of(&e, src, dst);
	if (version == 1)
		return write_v1(&e, out, len);
	if (version == 2)
		return write_v2(&e, out, len);
	return -EINVAL;
}
