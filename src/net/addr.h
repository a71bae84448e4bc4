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

/* Parse "HOST:PORT". Returns 0, or -EINVAL with a reason in <why> (static string). */
int net_addr_parse(const char *text, struct net_addr *out, const char **why);
/* Write "HOST:PORT" (IPv6 in brackets) into <out>; returns <out>. */
char *net_addr_format(const struct sockaddr *sa, char *out, size_t len);
/* The host part only, for X-Forwarded-For. */
char *net_addr_host(const struct sockaddr *sa, char *out, size_t len);

#endif
