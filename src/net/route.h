/*
 * route.h - which way the kernel sends to an address, asked without sending anything.
 *
 * A UDP socket connect()ed to an address makes the kernel choose the route as it would for a
 * connection to it (routing table, policy rules, the outgoing interface's source address) and
 * send nothing; getsockname() then names the source address it chose. getifaddrs() names the
 * interface that holds a source address, and sysfs the NUMA node of that interface's device
 * (class/net/IFNAME/device/numa_node under the sysfs root, net/numa.h; -1 where none is shown:
 * virtual interfaces, machines of one node). xfer uses it to bind each link to the source address
 * its route has, to say which NIC each link leaves by, and to warn when two links share one.
 */
#ifndef ACCELNET_NET_ROUTE_H
#define ACCELNET_NET_ROUTE_H

#include "net/addr.h"

#include <net/if.h>

struct net_iface {
	char name[IF_NAMESIZE]; /* "" when no interface holds the address */
	int numa_node;		/* -1: not shown */
	int loopback;		/* IFF_LOOPBACK */
};

/* The source address the kernel would use to reach <dst> (its port 0). 0, or -errno (no
 * route: -ENETUNREACH, -EHOSTUNREACH ...). */
int net_route_source(const struct net_addr *dst, struct net_addr *src);

/* The interface holding the address <a> (its port ignored), and that interface's NUMA node.
 * 0, or -ENOENT when no interface holds it (out left "", -1, 0), or -errno. */
int net_iface_of(const struct net_addr *a, struct net_iface *out);

#endif
