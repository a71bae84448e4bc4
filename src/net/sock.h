/*
 * sock.h - non-blocking TCP sockets: listen, accept, connect, and the options we always set.
 * Every function returns a descriptor (>= 0) or -errno.
 */
#ifndef ACCELNET_NET_SOCK_H
#define ACCELNET_NET_SOCK_H

#include "net/addr.h"

#include <errno.h>

/* A listening socket with SO_REUSEADDR, and SO_REUSEPORT when <reuseport> (one per worker). */
int sock_listen(const struct net_addr *addr, int reuseport);
/* Whether another socket already listens on <addr> (a port but ours may share): 0 when the
 * address is free to bind, -EADDRINUSE when one listens there, else -errno. Binds a probe
 * socket without SO_REUSEPORT and closes it; nothing stays open. */
int sock_probe_free(const struct net_addr *addr);
/* A second descriptor of the listening socket <fd> (close-on-exec): one per worker when a
 * listener is shared rather than opened per worker (socket activation). */
int sock_dup(int fd);
/* Accept one connection, non-blocking, TCP_NODELAY. -EAGAIN when none is pending. */
int sock_accept(int lfd, struct sockaddr_storage *peer, socklen_t *peerlen);
/* Start a non-blocking connect; completion shows as writability, then sock_error(). */
int sock_connect(const struct net_addr *addr);
/* The pending error of a socket (0 when connected), as -errno. */
int sock_error(int fd);
/* End both directions of a connected socket now, from any thread: a thread blocked reading
 * or writing it wakes with an error (how xfer stops a stream another thread runs). */
void sock_abort(int fd);
/* The local port a socket is bound to (for "port 0" listeners). */
int sock_local_port(int fd);

/*
 * Whether -errno <err> of a socket call means this host is short of something (descriptors,
 * socket buffers, memory) rather than that the peer failed: such an error must never count
 * against a backend, and a listener that meets it waits for a descriptor to free.
 */
static inline int sock_error_is_local(int err)
{
	return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM;
}

#endif
