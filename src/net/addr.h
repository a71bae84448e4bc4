/*
 * addr.h - socket addresses as users write them: "127.0.0.1:8080", "[::1]:8080",
 * "localhost:8080", "*:8080" (any IPv4 address).
 */
#ifndef ACCELNET_NET_ADDR_H
#define ACCELNET_NET_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

struct net_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* An address block, "10.0.0.0/8" or "2001:db8::/32"; a bare address is a block of one. */
struct net_cidr {
	int family; /* AF_INET or AF_INET6 */
	unsigned char addr[16];
	unsigned bits;
};

/* Parse a CIDR block. Returns 0, or -EINVAL with a reason in <why> (static string). */
int net_cidr_parse(const char *text, struct net_cidr *out, const char **why);
/* Is <sa> inside one of cidrs[0..n)? IPv4-mapped IPv6 addresses match IPv4 blocks. */
int net_cidr_match(const struct net_cidr *cidrs, size_t n, const struct sockaddr *sa);

/* Parse "HOST:PORT". Returns 0, or -EINVAL with a reason in <why> (static string). */
int net_addr_parse(const char *text, struct net_addr *out, const char **why);
/* Parse "IPv4:PORT" or "[IPv6]:PORT", numeric only: never a resolver. Returns 0, or -EINVAL
 * with a reason in <why> (static string). */
int net_addr_parse_numeric(const char *text, struct net_addr *out, const char **why);
/* Write "HOST:PORT" (IPv6 in brackets) into <out>; returns <out>. */
/* Do <x> and <y> name one address and port (IPv4 or IPv6, scope included)? */
int net_addr_same(const struct net_addr *x, const struct net_addr *y);
char *net_addr_format(const struct sockaddr *sa, char *out, size_t len);
/* The host part only, for X-Forwarded-For. */
char *net_addr_host(const struct sockaddr *sa, char *out, size_t len);

#endif
