/*
 * transport.h - how a chunk's bytes get from a sender's stream into the receiver: an ops table,
 * shaped as an RDMA-write transport needs it, with the TCP streams as today's implementation and
 * a loopback stand-in that moves chunks by "RDMA write" semantics inside one host.
 *
 * Every stream keeps its TCP connection as the control path (handshake, MANIFEST/NEED, the
 * acknowledgements, FINISH/DONE): the scheduler, the hashes, resume and the end game do not
 * know which transport carries the bytes. What the transport owns, per stream:
 *
 *   connect     after the handshake, set the data path up for a window of chunks of at most
 *               chunk_size bytes. TCP: nothing. Loopback: ask the receiver to register a
 *               region (REGION), map what it advertises after checking it is that region.
 *               (verbs: exchange queue pairs; the receiver's ibv_reg_mr gives address + rkey.)
 *   send_chunk  move one chunk (a source region: the file's pages or memory, and its
 *               descriptor: file, chunk, hash) and tell the receiver. TCP: CHUNK with the bytes.
 *               Loopback: write the bytes into the next slot of the receiver's region, then
 *               WRITTEN(descriptor, offset) on the control connection, the completion the
 *               receiver sees. (verbs: ibv_post_send RDMA_WRITE_WITH_IMM, the immediate naming
 *               the slot; the receiver's completion queue reports it.)
 *   complete    read the receiver's acknowledgement of the oldest chunk in flight; its slot is
 *               free again. (verbs: the sender's completion, then the ACK as today.)
 *   close       let the data path go (unmap; verbs: ibv_dereg_mr, destroy the queue pair).
 *
 * The receiver's half (post_recv) is xfer_region_post(): a sealed memfd of the size asked (at
 * most XFER_REGION_MAX), mapped, advertised with a random key; xfer_region_bytes() is the one
 * way a WRITTEN chunk is read, checked against what was advertised: no read outside the
 * region, whatever offset or length the peer names. Slots are used in turn: the sender never
 * has more chunks in flight than slots, and the receiver acknowledges a chunk only once it has
 * copied its bytes out, so a slot is never written while it is read (a hostile sender that
 * does anyway only corrupts its own chunk, which fails its hash: the receiver hashes the copy
 * it writes).
 *
 * The stand-in is for tests (ACCELNET_XFER_TRANSPORT=loopback on both ends, see docs/xfer.md):
 * it needs the two processes on one host under one user (the sender opens the receiver's memfd
 * through /proc), plain connections (TLS protects nothing a shared mapping bypasses), and it
 * sends no batches (each small file is a chunk of its own).
 */
#ifndef ACCELNET_XFER_TRANSPORT_H
#define ACCELNET_XFER_TRANSPORT_H

#include "net/conn.h"
#include "net/zc.h"
#include "xfer/source.h"
#include "xfer/wire.h"

#include <stdatomic.h>
#include <stdint.h>

#define XFER_REGION_MAX (256ull << 20) /* bytes a receiver registers for one connection */
#define XFER_TRANSPORT_ENV "ACCELNET_XFER_TRANSPORT"

/* One stream's data path (sender side). */
struct xfer_tp {
	const struct xfer_transport_ops *ops;
	struct net_conn *io;	    /* the control connection (TCP: the data path too) */
	struct net_zc *zc;	    /* TCP: zero-copy sends */
	_Atomic uint64_t *zc_bytes; /* TCP: counts the bytes sent with sendfile */
	uint8_t *map;		    /* loopback: the receiver's region, mapped */
	uint64_t map_len;
	uint32_t slot_len, nslots, next, oldest;
};

struct xfer_transport_ops {
	const char *name;
	/* 0, or -errno with why in <err> */
	int (*connect)(struct xfer_tp *tp, uint32_t chunk_size, unsigned window, char *err,
		       size_t errlen);
	int (*send_chunk)(struct xfer_tp *tp, const struct xfer_chunk_meta *cm,
			  const struct xfer_open *src, uint64_t off, uint32_t len);
	int (*complete)(struct xfer_tp *tp, struct xfer_hdr *h, uint8_t *meta, uint32_t max);
	void (*close)(struct xfer_tp *tp);
};

extern const struct xfer_transport_ops xfer_tcp_ops, xfer_loopback_ops;

/* The transport a sender uses: TCP, or the stand-in when ACCELNET_XFER_TRANSPORT=loopback. */
const struct xfer_transport_ops *xfer_transport_pick(void);

/* The receiver's registered region of one connection. */
struct xfer_rx_region {
	uint8_t *map;
	uint64_t len, key;
	int fd; /* -1: none */
};

/* Does this receiver offer regions (ACCELNET_XFER_TRANSPORT=loopback)? */
int xfer_region_offered(void);
/* post_recv: register <want> bytes (1 to XFER_REGION_MAX; a region registered before is let go)
 * and fill <adv> to advertise it. 0, or -EINVAL (a size out of range), -errno. */
int xfer_region_post(struct xfer_rx_region *r, uint64_t want, struct xfer_region *adv);
/* The bytes of a WRITTEN chunk: <len> bytes at <off>, checked against the region. 0 with
 * *bytes, or -EPROTO (no region, or outside it). */
int xfer_region_bytes(const struct xfer_rx_region *r, uint64_t off, uint32_t len,
		      const uint8_t **bytes);
void xfer_region_close(struct xfer_rx_region *r);

#endif
