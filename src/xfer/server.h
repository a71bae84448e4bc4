/*
 * server.h - the state one receiving side holds, shared by its roles.
 *
 * A receiving side is the daemon (`xfer serve`, daemon.c) or the receiving half of
 * `xfer get` (get.c). Either holds one struct xfer_server: the options and limits, the
 * transfers being received (receiver.c), the GETs being answered (pull.c, daemon only),
 * every open connection with the caps on them, the transfers that ended lately and why
 * (tombs), and the counters --metrics reports. Each connection is a struct
 * xfer_server_conn served by its own thread over a blocking socket (see conn.h).
 *
 * Connections are counted from accept until their descriptor is closed, in all and per peer
 * address, and found by an id, never by descriptor number (a number is reused as soon as it
 * is closed): admitted (xfer_server_admit), their handshake deadline lifted once it is over
 * (settle), their frames watched for a deadline of their own once the handshake is over
 * (watch), unlisted before the descriptor is closed (nothing may touch it after), and their
 * count given back after (release). Everything here is under s->mu unless it says otherwise.
 */
#ifndef ACCELNET_XFER_SERVER_H
#define ACCELNET_XFER_SERVER_H

#include "accelnet/xfer.h"
#include "core/list.h"
#include "net/addr.h"
#include "net/conn.h"
#include "xfer/conn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#define XFER_SERVER_IDLE_MS 300000 /* a connection with nothing to say for this long ends */

struct live; /* one open connection (server.c) */
struct rx_transfer;

struct xfer_server {
	const struct xfer_serve_opts *o;
	unsigned max_conns, max_per_addr, max_files;
	int handshake_ms;
	unsigned frame_ms; /* a frame's deadline: this, and a second per min_rate bytes of it */
	uint64_t min_rate; /* bytes per second (serve --min-rate-kib) */
	struct net_cidr relay[64]; /* --relay-to */
	unsigned nrelay;
	const char *const *asked; /* puller: the names it asked for */
	unsigned nasked;
	uint64_t reserved; /* bytes reserved by live transfers (under mu) */
	int wake_fd;	   /* an eventfd: a connection ended while accepting was paused */
	_Atomic int accept_paused;
	int dirfd;
	int puller;		/* this is `xfer get`'s receiving side, not a daemon */
	struct ssl_ctx_st *tls; /* accept TLS transfers */
	int tls_required;	/* mutual TLS: plain connections are refused */
	struct list_head pulls; /* struct pull (pull.c) */
	unsigned nlisten;
	char listen_names[XFER_LINKS_MAX][64];
	_Atomic uint64_t link_bytes[XFER_LINKS_MAX];
	/* transfers that ended, and why: a stream arriving after its transfer is gone gets the
	 * cause, not "no such transfer", and a late GET does not start over (the last 8) */
	struct {
		uint8_t id[XFER_SESSION_LEN];
		char why[200];
	} tombs[8];
	unsigned ntombs;
	int done_ok;	      /* puller: DONE was sent */
	uint64_t total_bytes; /* puller: the manifest's size */
	char peer_err[256];   /* puller: why the pull failed (the server's ERR, or our refusal) */
	struct xfer_token token;
	pthread_mutex_t mu;
	struct list_head transfers; /* struct rx_transfer (receiver.c), under mu */
	unsigned conns;		    /* open connections, handed over to a pull or not (under mu) */
	unsigned threads;	    /* connection threads running (under mu) */
	pthread_cond_t conns_cv;
	struct live *live;
	unsigned nlive, cap_live;
	uint64_t live_seq;
	unsigned corrupt_every; /* fault injection for tests: ACCELNET_XFER_CORRUPT_EVERY */
	_Atomic uint64_t corrupt_seq;
	/* metrics */
	_Atomic uint64_t m_bytes, m_chunks, m_dup, m_bad, m_files, m_sessions, m_auth_fail,
	    m_errors, m_conns_total, m_dup_bytes, m_batches, m_slow_frames;
	_Atomic uint32_t parts; /* manifest parts taken (a get client reports them) */
};

/* One connection of a receiving side, owned by its thread. */
struct xfer_server_conn {
	struct xfer_server *srv;
	struct net_conn io;
	unsigned link; /* the listener (or, pulling, the link) it came by */
	uint64_t live_id;
	struct rx_transfer *rx; /* the transfer it carries, once it named one */
	uint8_t *piece;		/* the receiver loop's buffer for a piece of a chunk */
	uint8_t *batch;		/* and for a BATCH's bytes (XFER_BATCH_BYTES), from the first */
	/* when the frame being read must have come whole (clock_now_ms(); 0: none is being
	 * read): set and cleared by its thread alone (xfer_server_frame_*), read by the accept
	 * loop, which cuts the connection past it (xfer_server_expire) */
	_Atomic uint64_t frame_due;
};

/* Mutex, condition, lists and the limits from <o> (defaults for those left 0; a puller
 * has no options of its own); xfer_server_destroy() frees what it holds. */
void xfer_server_init(struct xfer_server *s, const struct xfer_serve_opts *o);
void xfer_server_destroy(struct xfer_server *s);

/* Count a new connection from <peer> unless a cap says no: NULL, or why not (under the
 * caps, the connection is counted, listed as *id, and its handshake must end within
 * handshake_ms). */
const char *xfer_server_admit(struct xfer_server *s, int fd, const struct sockaddr_storage *peer,
			      uint64_t *id);
/* The handshake of connection <id> is over (either way): the deadline no longer applies. */
void xfer_server_settle(struct xfer_server *s, uint64_t id);
/*
 * A frame's deadline (serve --frame-ms, --min-rate-kib). Timeouts are per read, so a peer
 * sending a frame a byte every few seconds would hold its connection, and its thread, for
 * ever; instead a frame must come whole within frame_ms of its first byte, and a second more
 * for each min_rate bytes it says it carries. The time between frames does not count (the
 * idle timeout is for that). Watched connections (the daemon's: xfer_server_watch) are cut
 * by xfer_server_expire() past it; a get's receiving half is not watched (its peer is the
 * server it chose). The connection's thread marks the frame's first byte, its length once its
 * header is read, and its last byte.
 */
void xfer_server_frame_begin(struct xfer_server_conn *c);
void xfer_server_frame_length(struct xfer_server_conn *c, uint64_t bytes);
static inline void xfer_server_frame_end(struct xfer_server_conn *c)
{
	atomic_store_explicit(&c->frame_due, 0, memory_order_relaxed);
}
/* Connection <id>'s frames are watched through <c> (NULL: no more, before <c> is freed). */
void xfer_server_watch(struct xfer_server *s, uint64_t id, struct xfer_server_conn *c);
/* Cut off the connections whose handshake, or a frame, ran past its deadline (however they
 * trickle). */
void xfer_server_expire(struct xfer_server *s, uint64_t now_ms);
/* Before closing connection <id>: it leaves the list. The _locked form under s->mu. */
void xfer_server_unlist(struct xfer_server *s, uint64_t id);
void xfer_server_unlist_locked(struct xfer_server *s, uint64_t id);
/* After closing a connection: its count goes back, and a paused accept loop may go on. */
void xfer_server_release(struct xfer_server *s);
/* Stop: end every listed connection (their threads see it and leave). */
void xfer_server_shutdown_all(struct xfer_server *s);

/* Remember why transfer <id> ended (under s->mu). */
void xfer_server_tomb_add_locked(struct xfer_server *s, const uint8_t id[XFER_SESSION_LEN],
				 const char *why);
/* Why transfer <id> ended, if it did lately (under s->mu): copied to <why>, 1; else 0. */
int xfer_server_tomb_find_locked(struct xfer_server *s, const uint8_t id[XFER_SESSION_LEN],
				 char *why, size_t len);

/* The receiving side refuses something: tell the peer (ERR), and, pulling, remember it as
 * the reason the pull failed. */
void xfer_server_refuse(struct xfer_server *s, struct net_conn *c, const char *msg);
/* Pulling: the first reason the pull failed, kept. */
void xfer_server_fail(struct xfer_server *s, const char *why);

/* TCP keepalive: a peer behind a dead link is noticed in about 30 s, not at the idle timeout. */
void xfer_server_keepalive(int fd);

#endif
