/*
 * zc.h - MSG_ZEROCOPY sends of memory buffers, with honest accounting.
 *
 * A zero-copy send pins the user pages instead of copying them into the socket; the kernel
 * reports on the socket's error queue when it is done with them, and whether it had to copy
 * after all (it does for loopback and veth peers, or when the device cannot scatter-gather).
 * The caller's buffer must stay untouched until every send is reported: xfer_zc_reap() with
 * a wait before the stream lets go of it. Files do not come here: sendfile serves them from
 * the page cache without any user-space copy.
 */
#ifndef ACCELNET_XFER_ZC_H
#define ACCELNET_XFER_ZC_H

#include <stddef.h>
#include <stdint.h>

#define XFER_ZC_RING 1024
#define XFER_ZC_MIN (64u << 10) /* smaller sends copy: pinning costs more than it saves */

struct xfer_zc {
	int enabled;
	uint32_t next; /* id of the next zero-copy send on this socket */
	uint32_t done; /* sends reported so far */
	uint32_t size[XFER_ZC_RING];
	uint64_t bytes;	 /* sent with MSG_ZEROCOPY */
	uint64_t copied; /* of those, copied by the kernel anyway */
};

/* Turn SO_ZEROCOPY on for <fd>; z->enabled says whether it took. */
void xfer_zc_init(struct xfer_zc *z, int fd);
/* Send all of <buf> (zero-copy when enabled and large enough): 0 or -errno. */
int xfer_zc_send(struct xfer_zc *z, int fd, const void *buf, size_t len);
/* Collect completion reports; with <wait_ms>, until every send is reported or time is up.
 * Returns the number of sends still unreported. */
uint32_t xfer_zc_reap(struct xfer_zc *z, int fd, int wait_ms);

#endif
