/*
 * route.c - the kernel's choice of route, source address and interface (see route.h).
 */
#include "net/route.h"

#include "net/numa.h"

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int net_route_source(const struct net_addr *dst, struct net_addr *src)
{
	int fd = socket(dst->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = 0;
	/* connect() on a datagram socket only picks the route and the source: nothing is sent */
	if (connect(fd, (const struct sockaddr *)&dst->ss, dst->len) < 0) {
		rc = -errno;
		goto out;
	}
	src->len = sizeof(src->ss);
	if (getsockname(fd, (struct sockaddr *)&src->ss, &src->len) < 0) {
		rc = -errno;
		goto out;
	}
	if (src->ss.ss_family == AF_INET)
		((struct sockaddr_in *)&src->ss)->sin_port = 0;
	else if (src->ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&src->ss)->sin6_port = 0;
out:
	close(fd);
	return rc;
}

/* Do <a> and <b> hold the same host address (ports aside)? */
static int same_host(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return 0;
}

int net_iface_of(const struct net_addr *a, struct net_iface *out)
{
	struct ifaddrs *all;
	*out = (struct net_iface){.numa_node = -1};
	if (getifaddrs(&all) < 0)
		return -errno;
	int rc = -ENOENT;
	for (const struct ifaddrs *i = all; i; i = i->ifa_next) {
		if (!i->ifa_addr || !same_host(i->ifa_addr, (const struct sockaddr *)&a->ss))
			continue;
		snprintf(out->name, sizeof(out->name), "%s", i->ifa_name);
		out->loopback = !!(i->ifa_flags & IFF_LOOPBACK);
		out->numa_node = numa_read_nic_node(out->name);
		rc = 0;
		break;
	}
	freeifaddrs(all);
	return rc;
}
