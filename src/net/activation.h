/*
 * activation.h - listening sockets handed over by a service manager (systemd socket
 * activation): LISTEN_PID names this process, LISTEN_FDS counts descriptors from 3 on, and
 * LISTEN_FDNAMES (optional) names them, colon-separated.
 *
 * The sockets are matched to the config's listeners by the address each is bound to, so the
 * .socket unit and the config say the same thing and neither needs the other's order. The
 * caller (proxy.c) asks for each listener's address; what it takes is its own to share among
 * the workers; what nobody took is an error the caller reports (a socket the manager holds
 * open that nothing would ever accept on).
 */
#ifndef ACCELNET_NET_ACTIVATION_H
#define ACCELNET_NET_ACTIVATION_H

#include "net/addr.h"

#include <stddef.h>

struct activation_socket {
	int fd;
	struct net_addr addr; /* what it is bound to (getsockname) */
	char name[64];	      /* from LISTEN_FDNAMES, or "fd N" */
	int taken;
};

struct activation {
	struct activation_socket *socks;
	size_t n;
};

/*
 * Take the sockets passed to this process: each checked to be a listening TCP socket (IPv4
 * or IPv6), made non-blocking and close-on-exec; the three variables are unset so nothing
 * started later takes them for its own. None passed (no LISTEN_FDS, or LISTEN_PID is
 * another process): 0 with a->n == 0. Returns 0, or -errno with <err> filled (the
 * descriptors are then closed).
 */
int activation_take(struct activation *a, char *err, size_t errlen);
/* The passed socket bound to exactly <addr>, marked taken; -1 when there is none. */
int activation_find(struct activation *a, const struct net_addr *addr);
/* Every socket not yet taken that is bound to <addr> (several: a running accelnet hands over
 * each worker's, see control/upgrade.h), at most <cap>, into <out>, marked taken. */
size_t activation_find_all(struct activation *a, const struct net_addr *addr, int *out, size_t cap);
/* The first socket never taken, or NULL. */
const struct activation_socket *activation_untaken(const struct activation *a);
/* Close every passed socket (the taken ones too: the caller dup()ed what it keeps). */
void activation_close(struct activation *a);

#endif
