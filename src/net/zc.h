/*
 * zc.h - sending without copying on a plain TCP connection: MSG_ZEROCOPY for memory,
 * sendfile for files, and a corked head sent ahead of either.
 *
 * A zero-copy send pins the user pages instead of copying them into the socket; the kernel
 * reports on the socket's error queue when it is done with them, and whether it had to copy
 * after all (it does for loopback and veth peers, or when the device cannot scatter-gather).
 * The caller's buffer must stay untouched until every send is reported: net_zc_reap() with
 * a wait before the stream lets go of it. Files do not need it: sendfile serves them from
 * the page cache without any user-space copy.
 *
 * These work on the descriptor of a plain connection only (TLS encrypts in user space: its
 * bytes go through net_conn_write_all). For a blocking socket; -ETIMEDOUT is its send
 * timeout running out. Every function returns 0 or -errno unless it says otherwise.
 */
#ifndef ACCELNET_NET_ZC_H
#define ACCELNET_NET_ZC_H

#include "net/conn.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NET_ZC_RING 1024
#define NET_ZC_MIN (64u << 10) /* smaller sends copy: pinning costs more than it saves */

struct net_zc {
	int enabled;
	uint32_t next; /* id of the next zero-copy send on this socket */
	uint32_t done; /* sends reported so far */
	uint32_t size[NET_ZC_RING];
	uint64_t bytes;	 /* sent with MSG_ZEROCOPY (or sendfile, counted by the caller) */
	uint64_t copied; /* of those, copied by the kernel anyway */
};

/* Turn SO_ZEROCOPY on for <c>; z->enabled says whether it took. */
void net_zc_init(struct net_zc *z, struct net_conn *c);
/* Send all of <buf> (zero-copy when enabled and large enough). */
int net_zc_send(struct net_zc *z, struct net_conn *c, const void *buf, size_t len);
/* Collect completion reports; with <wait_ms>, until every send is reported or time is up.
 * Returns the number of sends still unreported. */
uint32_t net_zc_reap(struct net_zc *z, struct net_conn *c, int wait_ms);
/* Send all of a short <head> with MSG_MORE: it leaves with the bytes sent next. */
int net_zc_send_head(struct net_conn *c, const void *head, size_t len);
/* Send <len> bytes of file <fd> from <off> with sendfile. */
int net_zc_sendfile(struct net_conn *c, int fd, off_t off, size_t len);

#endif
