/*
 * engine.c - links, streams and the end of a transfer (see engine.h).
 *
 * A stream thread opens its link through xfer_conn_open (dialed from the link's source
 * address, TLS or the plain magic, HELLO with the transfer's session id), then loops: take a
 * chunk from the scheduler while it has fewer than XFER_WINDOW in flight, send it (plain:
 * header and meta with MSG_MORE, the bytes with sendfile or zero-copy from memory; TLS:
 * written through the connection), and read acknowledgements, which come back in order. A
 * chunk that is a whole small file takes the small files right behind it in the queue along
 * (while the link would take them, up to XFER_BATCH_FILES or XFER_BATCH_BYTES) into one BATCH,
 * copied into the stream's buffer and written at once: one window slot and one
 * acknowledgement for all of them (a batch of one when another stream took those behind it). Not
 * towards a bcast relay, which sends from its parts. A send or a wait for an acknowledgement that
 * makes no progress within the stall timeout loses the stream: its chunks go back to the scheduler
 * and the thread dials again, every second (or every stall timeout, when that is shorter), for as
 * long as the transfer lasts, not once: a link that comes back is used again. A refusal (-EACCES:
 * token, certificate) ends the transfer instead; adopted connections (get) are not redialed. A link
 * whose streams are all gone is down. The transfer fails when no stream is up for twice the stall
 * timeout (at least 3 s), or when no stream thread is left.
 *
 * Start and end: every stream but the first dials while the first sends the manifest, so
 * each link carries chunks as soon as NEED is answered. A streamed manifest (a tree walked
 * while it is sent) comes in parts on the first stream's connection, and that stream carries
 * chunks meanwhile: the caller queues each part (up to XFER_PARTS_AHEAD waiting for their NEED),
 * stream 0's thread sends it between its chunks and batches and reads its NEED in its turn among
 * the acknowledgements (the receiver answers a connection's messages in order), then feeds that
 * part's chunks to the scheduler at once. One thread reads and writes the connection, TLS or
 * not; waiting for a NEED it also wakes for a part to send (an eventfd). The per-file and
 * per-chunk entries live in tables that grow without moving (table.h), and the scheduler stays
 * open (not done when every chunk it has is) until the last part is answered. Once every chunk
 * is acknowledged, a stream still holding chunks holds only end-game copies whose twins won: its
 * connection is cut rather than waited for (not counted as lost; never the manifest's, which keeps
 * the transfer alive on the receiver), and FINISH goes on a parked stream.
 */
#include "xfer/engine.h"

#include "core/clock.h"
#include "core/log.h"
#include "net/addr.h"
#include "net/route.h"
#include "net/sock.h"
#include "xfer/conn.h"
#include "xfer/place.h"
#include "xfer/sched.h"
#include "xfer/store.h"
#include "xfer/transport.h"
#include "net/tls.h"
#include "net/zc.h"

#include <errno.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#define XFER_WINDOW 3
#define XFER_PARTS_AHEAD 4 /* manifest parts sent before the oldest one's NEED is read */
_Static_assert(XFER_SCHED_LINKS == XFER_LINKS_MAX, "the scheduler keeps a rate per link");
#define XFER_FINISH_TIMEOUT_MS 600000

enum stream_state { ST_RUNNING, ST_PARKED, ST_DEAD };

struct link {
	struct xfer_path path;	 /* where to dial, from which source address */
	struct net_iface nic;	 /* the interface that source address is on */
	struct xfer_place place; /* the CPUs of that NIC's node its streams run on */
	_Atomic uint64_t bytes, sent;
	_Atomic unsigned up, failed, dups;
	uint64_t last_bytes;
	double gbps;
};

/* What a stream has in its window: one chunk, a batch of small files' chunks, or (stream 0,
 * while the manifest is listed) a part of the manifest waiting for its NEED. */
struct unit {
	uint32_t n;    /* ids in ids[]; a manifest part when 0 */
	uint8_t batch; /* sent as a BATCH (small files whole, one of them or more) */
	uint32_t ids[XFER_BATCH_FILES];
};

struct stream {
	struct xfer_engine *e;
	uint8_t *batch; /* a BATCH frame is built here (allocated with the stream's first) */
	unsigned link;
	struct net_conn io;
	pthread_t th;
	int started;
	_Atomic int state;
	_Atomic unsigned holding; /* chunks in its window */
	/* io.fd while its connection is open, for the engine's thread to abort it with (the
	 * stream's own thread opens and closes io): -1 when closed */
	_Atomic int live_fd;
	struct net_zc zc;
	struct xfer_tp tp; /* how its chunks' bytes travel (transport.h) */
};

/* What the engine keeps per file and per chunk, in tables that grow with a streamed manifest
 * while the streams read them (table.h): a stream reads only what the scheduler gave it. */
struct efile {
	struct xfer_file f;
	uint32_t first; /* its first chunk id */
};

struct echunk {
	uint64_t hash;
	uint32_t file;
	_Atomic uint8_t known; /* hash is set */
	uint8_t need;	       /* the receiver lacks it */
	_Atomic uint8_t st;    /* a relay's: CHUNK_FED, CHUNK_ANSWERED */
};

/* A relay feeds chunks as they arrive, and its parts are answered by the next hop meanwhile: a
 * chunk goes to the scheduler once both happened, by whichever came second. */
#define CHUNK_FED 1
#define CHUNK_ANSWERED 2

struct xfer_engine {
	struct xfer_manifest m;	   /* chunk size, hops; nfiles: listed so far; no files */
	struct xfer_table fil;	   /* struct efile */
	struct xfer_table chk;	   /* struct echunk */
	struct xfer_sources files; /* the sources, opened as chunks are sent, a few at a time */
	_Atomic uint32_t nchunks;  /* chunks listed (released once their entries are filled) */
	int listing;		   /* parts of the manifest still to come (xfer_engine_list) */
	uint64_t next_progress_ns; /* while listing: when xfer_engine_tick reports next */
	_Atomic uint32_t parts;	   /* parts of the manifest answered */
	/* parts listed (xfer_engine_list) and not answered yet, oldest first, under parts_mu: the
	 * first <nsent> went out on stream 0's connection, which sends the others between its
	 * chunks, reads each NEED in its turn among its acknowledgements and feeds that part's
	 * chunks; <parts_fd> (an eventfd) wakes it when one is queued while it waits for a NEED */
	pthread_mutex_t parts_mu;
	pthread_cond_t parts_cv;
	struct part_out {
		uint32_t first_file, nfiles, first_id, nchunks;
		uint8_t last;
		uint8_t *enc; /* the encoded part, until sent */
		size_t len;
	} out[XFER_PARTS_AHEAD];
	unsigned nout, nsent;
	int parts_failed;	/* stream 0 lost the manifest's connection: no part goes out */
	_Atomic int parts_open; /* parts may still come or wait for their NEED */
	int parts_fd;
	uint64_t t_listed_ns; /* when the last part was answered */
	struct xfer_sched sched;
	struct xfer_token token;
	uint8_t session[XFER_SESSION_LEN];
	unsigned nlinks, per_link, stall_ms, progress_ms;
	unsigned need_frame_ms; /* a NEED, from its first byte (xfer_frame_recv_timed) ... */
	uint64_t need_min_rate; /* ... and a second more per this many bytes */
	struct link links[XFER_LINKS_MAX];
	struct stream *streams;
	unsigned nstreams;
	_Atomic uint64_t bytes_sent, bytes_acked, zc_bytes, zc_copied;
	_Atomic uint32_t chunks_bad;
	_Atomic uint64_t bytes_skipped; /* stream 0 adds while listing */
	uint64_t bytes_total;
	uint64_t t0_ns;
	pthread_mutex_t err_mu;
	char error[256];
	void (*progress)(const struct xfer_report *r, void *arg);
	void *arg;
	const struct xfer_adopt *adopt;
	struct ssl_ctx_st *tls; /* the transfer runs over TLS */
	int cancel_fd;		/* an eventfd, readable once the streams should stop dialing */
	_Atomic int ended;	/* every chunk acknowledged: streams still on copies are cut */
	int batch;		/* small files go in batches (not to a bcast relay) */
	int singly;		/* chunks are fed one by one as they arrive (a relay) */
	const struct xfer_transport_ops *tp_ops;
};

/* The first error wins: later ones are consequences of it. */
__attribute__((format(printf, 2, 3))) static void set_error(struct xfer_engine *e, const char *fmt,
							    ...)
{
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&e->err_mu);
	if (!e->error[0])
		vsnprintf(e->error, sizeof(e->error), fmt, ap);
	pthread_mutex_unlock(&e->err_mu);
	va_end(ap);
}

/* Stream 0 lost the manifest's connection while parts were still to go: the lister stops. */
static void parts_fail(struct xfer_engine *e)
{
	pthread_mutex_lock(&e->parts_mu);
	e->parts_failed = 1;
	pthread_cond_broadcast(&e->parts_cv);
	pthread_mutex_unlock(&e->parts_mu);
}

static struct efile *ef(const struct xfer_engine *e, uint32_t f)
{
	return xfer_table_at(&e->fil, f);
}

static struct echunk *ec(const struct xfer_engine *e, uint32_t id)
{
	return xfer_table_at(&e->chk, id);
}

static void chunk_span(const struct xfer_engine *e, uint32_t id, uint32_t *f, uint64_t *off,
		       uint32_t *len)
{
	*f = ec(e, id)->file;
	uint32_t k = id - ef(e, *f)->first;
	*off = (uint64_t)k * e->m.chunk_size;
	uint64_t left = ef(e, *f)->f.size - *off;
	*len = (uint32_t)(left < e->m.chunk_size ? left : e->m.chunk_size);
}

/* Chunk <id>'s hash: known, or computed from <buf>, its file's memory. */
static uint64_t chunk_hash(struct xfer_engine *e, uint32_t id, const uint8_t *buf)
{
	struct echunk *c = ec(e, id);
	if (!atomic_load_explicit(&c->known, memory_order_acquire)) {
		uint32_t f, len;
		uint64_t off;
		chunk_span(e, id, &f, &off, &len);
		c->hash = XXH3_64bits(buf + off, len);
		atomic_store_explicit(&c->known, 1, memory_order_release);
	}
	return c->hash;
}

/* File <f>'s source, held until xfer_sources_put: 0, or -errno and the transfer fails (a
 * file that vanished or changed cannot be sent). */
static int source_get(struct xfer_engine *e, uint32_t f, struct xfer_open *o)
{
	char err[256];
	int rc = xfer_sources_get(&e->files, f, o, err, sizeof(err));
	if (rc) {
		set_error(e, "%s", err);
		xfer_sched_abort(&e->sched, rc);
	}
	return rc;
}

/* Send one chunk: frame header and meta, then the bytes. */
static int send_chunk(struct stream *s, uint32_t id)
{
	struct xfer_engine *e = s->e;
	uint32_t f, len;
	uint64_t off;
	struct xfer_open held;
	chunk_span(e, id, &f, &off, &len);
	int rc = source_get(e, f, &held);
	if (rc)
		return rc;
	struct xfer_chunk_meta cm = {
	    .file = f, .chunk = id - ef(e, f)->first, .hash = chunk_hash(e, id, held.buf)};
	rc = s->tp.ops->send_chunk(&s->tp, &cm, &held, off, len);
	xfer_sources_put(&e->files, f);
	if (rc)
		return rc;
	atomic_fetch_add(&e->bytes_sent, len);
	atomic_fetch_add(&e->links[s->link].sent, len);
	return 0;
}

/*
 * Send a batch: the small files of <u>, each read whole (through the open set, which checks
 * it is still the file the manifest named) and copied into the stream's frame buffer beside
 * its hash, then header, meta and bytes in one write.
 */
static int send_batch(struct stream *s, const struct unit *u)
{
	struct xfer_engine *e = s->e;
	struct xfer_batch b = {.count = u->n};
	uint32_t meta_len = 4 + u->n * XFER_BATCH_ENTRY, total = 0;
	if (!s->batch &&
	    !(s->batch = malloc(XFER_HDR_LEN + XFER_BATCH_META_MAX + XFER_BATCH_BYTES)))
		return -ENOMEM;
	uint8_t *data = s->batch + XFER_HDR_LEN + meta_len;
	for (uint32_t i = 0; i < u->n; i++) {
		uint32_t f, len;
		uint64_t off;
		struct xfer_open held;
		chunk_span(e, u->ids[i], &f, &off, &len);
		int rc = source_get(e, f, &held);
		if (rc)
			return rc;
		b.f[i] = (struct xfer_batch_file){
		    .file = f, .len = len, .hash = chunk_hash(e, u->ids[i], held.buf)};
		memcpy(data + total, held.buf, len);
		xfer_sources_put(&e->files, f);
		total += len;
	}
	xfer_batch_encode(s->batch + XFER_HDR_LEN, &b);
	xfer_hdr_encode(s->batch, XFER_BATCH, meta_len, total);
	int rc = net_conn_write_all(&s->io, s->batch, XFER_HDR_LEN + meta_len + total);
	if (rc)
		return rc;
	atomic_fetch_add(&e->bytes_sent, total);
	atomic_fetch_add(&e->links[s->link].sent, total);
	return 0;
}

/* An ERR from the receiver: the transfer fails with its text. */
static int receiver_refused(struct xfer_engine *e, const uint8_t *meta, uint32_t len)
{
	char text[300];
	xfer_err_decode(meta, len, text, sizeof(text));
	set_error(e, "receiver: %s", text);
	xfer_sched_abort(&e->sched, -EIO);
	return -EIO;
}

/* Settle chunk <id> as the receiver's <status> says: 0, or -EIO (XFER_ACK_IO: the receiver
 * says why in an ERR that follows, which the caller reads). */
static int settle(struct stream *s, uint32_t id, uint8_t status)
{
	struct xfer_engine *e = s->e;
	uint32_t f, len;
	uint64_t off;
	chunk_span(e, id, &f, &off, &len);
	switch (status) {
	case XFER_ACK_OK:
	case XFER_ACK_DUP:
		if (xfer_sched_ack(&e->sched, id, (uint8_t)s->link, clock_now_ns())) {
			atomic_fetch_add(&e->links[s->link].bytes, len);
			atomic_fetch_add(&e->bytes_acked, len);
		}
		return 0;
	case XFER_ACK_BAD:
		atomic_fetch_add(&e->chunks_bad, 1);
		if (xfer_sched_bad(&e->sched, id, (uint8_t)s->link))
			set_error(e, "%s", "a chunk arrived corrupt too many times");
		return 0;
	default:
		return -EIO;
	}
}

/* Read one acknowledgement (ACK, or BATCH_ACK for a batch) and settle the chunks of <u>. */
static int read_ack(struct stream *s, const struct unit *u)
{
	struct xfer_engine *e = s->e;
	struct xfer_hdr h;
	uint8_t meta[XFER_BATCH_ACK_MAX + 300];
	int rc = s->tp.ops->complete(&s->tp, &h, meta, sizeof(meta) - 1);
	if (rc)
		return rc;
	if (h.type == XFER_ERR)
		return receiver_refused(e, meta, h.meta_len);
	if (u->batch) {
		struct xfer_batch b = {.count = u->n};
		for (uint32_t i = 0; i < u->n; i++)
			b.f[i].file = ec(e, u->ids[i])->file;
		if (h.type != XFER_BATCH_ACK || xfer_batch_ack_decode(meta, h.meta_len, &b))
			return -EPROTO;
		for (uint32_t i = 0; i < u->n && !rc; i++)
			rc = settle(s, u->ids[i], b.status[i]);
	} else {
		struct xfer_ack a;
		uint32_t id = u->ids[0], f = ec(e, id)->file;
		if (h.type != XFER_ACK || xfer_ack_decode(meta, h.meta_len, &a))
			return -EPROTO;
		if (a.file != f || a.chunk != id - ef(e, f)->first)
			return -EPROTO;
		rc = settle(s, id, a.status);
	}
	if (rc) {
		if (xfer_frame_recv(&s->io, &h, meta, sizeof(meta) - 1) == 0 && h.type == XFER_ERR)
			receiver_refused(e, meta, h.meta_len);
		set_error(e, "%s", "receiver could not write a chunk");
		xfer_sched_abort(&e->sched, -EIO);
	}
	return rc;
}

/* A chunk that may go in a batch: the whole of a small file. */
static int batchable(const struct xfer_engine *e, uint32_t id)
{
	const struct xfer_file *fi = &ef(e, ec(e, id)->file)->f;
	return e->batch && fi->nchunks == 1 && fi->size <= XFER_BATCH_FILE_MAX;
}

/* <u> holds one batchable chunk just taken: add the small files that follow it in the queue,
 * as long as the link would take them, up to a batch's limits. */
static void batch_fill(struct stream *s, struct unit *u)
{
	struct xfer_engine *e = s->e;
	uint64_t bytes = ef(e, ec(e, u->ids[0])->file)->f.size;
	uint32_t listed = atomic_load_explicit(&e->nchunks, memory_order_acquire);
	for (uint32_t next = u->ids[0] + 1;
	     u->n < XFER_BATCH_FILES && next < listed && batchable(e, next); next++) {
		uint64_t len = ef(e, ec(e, next)->file)->f.size;
		if (bytes + len > XFER_BATCH_BYTES ||
		    xfer_sched_take_next(&e->sched, (uint8_t)s->link, clock_now_ns(), next))
			break;
		u->ids[u->n++] = next;
		bytes += len;
	}
}

static void stream_close(struct stream *s);

/* Set up the data path of a stream just connected (transport.h). A transport the receiver
 * does not offer ends the transfer: dialing again would not change it. */
static int stream_transport(struct stream *s)
{
	struct xfer_engine *e = s->e;
	net_zc_init(&s->zc, &s->io);
	s->tp.ops = e->tp_ops;
	s->tp.io = &s->io;
	s->tp.zc = &s->zc;
	s->tp.zc_bytes = &e->zc_bytes;
	char err[300];
	int rc = s->tp.ops->connect(&s->tp, e->m.chunk_size, XFER_WINDOW, err, sizeof(err));
	if (rc) {
		set_error(e, "transport %s: no data path to the receiver: %s", s->tp.ops->name,
			  err);
		xfer_sched_abort(&e->sched, -EPROTO);
		stream_close(s);
		return -EACCES;
	}
	return 0;
}

static int stream_dial(struct stream *s)
{
	struct xfer_engine *e = s->e;
	if (e->adopt) {
		unsigned link = 0;
		if (e->adopt->take(e->adopt->arg, &link, &s->io) < 0)
			return -ENOTCONN;
		atomic_store(&s->live_fd, s->io.fd);
		s->link = link < e->nlinks ? link : 0;
		xfer_set_timeout(s->io.fd, (int)e->stall_ms);
		return stream_transport(s);
	}
	/* a connect gets at least 3 s, so a lost SYN can be sent again (its first retry is at 1 s);
	 * the stall timeout then bounds every send and receive */
	struct xfer_dial d = {.tls = e->tls,
			      .token = &e->token,
			      .role = XFER_ROLE_DATA,
			      .session = e->session,
			      .connect_ms = e->stall_ms > 3000 ? (int)e->stall_ms : 3000,
			      .stall_ms = (int)e->stall_ms,
			      .cancel_fd = e->cancel_fd};
	char err[256];
	int reached;
	int rc = xfer_conn_open(&e->links[s->link].path, &d, &s->io, &reached, err, sizeof(err));
	if (rc == -EACCES) {
		set_error(e, "receiver refused: %s", err);
		xfer_sched_abort(&e->sched, -EACCES);
	}
	if (rc)
		return rc;
	atomic_store(&s->live_fd, s->io.fd);
	return stream_transport(s);
}

/* Close a stream's connection: an adopted one goes back to its lender, which closes it. */
static void stream_close(struct stream *s)
{
	struct xfer_engine *e = s->e;
	atomic_store(&s->live_fd, -1);
	if (s->io.fd >= 0 && e->adopt && e->adopt->put)
		e->adopt->put(e->adopt->arg, &s->io);
	else
		net_conn_close(&s->io);
}

/* Cut <s>'s connection from another thread: its own thread's next read or write fails. */
static void stream_abort(struct stream *s)
{
	int fd = atomic_load(&s->live_fd);
	if (fd >= 0)
		sock_abort(fd);
}

static int parts_send(struct stream *s, struct unit *win, unsigned *nwin);
static int part_read(struct stream *s, int *woken);

/* One stream's life: see the essay above. Answers come back in the order their messages went,
 * so the window is one queue: chunks and batches (at most XFER_WINDOW) and, on stream 0 while
 * the manifest is listed, the parts sent between them. */
static int stream_loop(struct stream *s)
{
	struct xfer_engine *e = s->e;
	struct unit win[XFER_WINDOW + XFER_PARTS_AHEAD];
	unsigned nwin = 0, ndata = 0;
	int rc = 0, lister = s == e->streams;
	for (;;) {
		if (lister && atomic_load(&e->parts_open) && (rc = parts_send(s, win, &nwin)))
			break;
		if (ndata < XFER_WINDOW) {
			uint32_t id;
			int dup;
			rc =
			    xfer_sched_take(&e->sched, (uint8_t)s->link, clock_now_ns(), &id, &dup);
			if (rc == 0) {
				struct unit *u = &win[nwin++];
				u->n = 1;
				u->ids[0] = id;
				/* a small file goes in a batch even alone (another stream took the
				 * files behind it): as a chunk it would land only at FINISH */
				u->batch = !dup && batchable(e, id);
				if (u->batch)
					batch_fill(s, u);
				atomic_store(&s->holding, ++ndata);
				if (dup)
					atomic_fetch_add(&e->links[s->link].dups, 1);
				if ((rc = u->batch ? send_batch(s, u) : send_chunk(s, id)))
					break;
				continue;
			}
			if (rc == -ENODATA && nwin == 0)
				return 0;
			if (rc != -EAGAIN && rc != -ENODATA)
				break;
			if (nwin == 0) {
				xfer_sched_wait(&e->sched, 50);
				continue;
			}
		}
		if (win[0].n == 0) {
			int woken = 0;
			if ((rc = part_read(s, &woken)))
				break;
			if (woken) /* a part to send first */
				continue;
		} else if ((rc = read_ack(s, &win[0]))) {
			break;
		} else {
			ndata--;
		}
		for (unsigned i = 1; i < nwin; i++) /* a window of a few: moved, not ringed */
			win[i - 1] = win[i];
		nwin--;
		atomic_store(&s->holding, ndata);
		net_zc_reap(&s->zc, &s->io, 0);
	}
	for (unsigned i = 0; i < nwin; i++)
		for (uint32_t k = 0; k < win[i].n; k++)
			xfer_sched_lost(&e->sched, win[i].ids[k], (uint8_t)s->link);
	atomic_store(&s->holding, 0);
	return rc;
}

/* Done, or given up: nothing more for a stream to do. */
static int transfer_over(struct xfer_engine *e)
{
	pthread_mutex_lock(&e->sched.mu);
	int over = (e->sched.done == e->sched.n && !e->sched.open) || e->sched.error;
	pthread_mutex_unlock(&e->sched.mu);
	return over;
}

/*
 * A stream's life: dial, carry chunks until the transfer is over or the connection fails,
 * and after a failure dial again, every second or so, for as long as the transfer lasts, so
 * a link that comes back is used again. Adopted connections (get) are not redialed.
 */
static void *stream_main(void *arg)
{
	struct stream *s = arg;
	struct xfer_engine *e = s->e;
	unsigned retry_ms = e->stall_ms < 1000 ? e->stall_ms : 1000;
	xfer_place_enter(&e->links[s->link].place);
	for (int attempt = 0;; attempt++) {
		if (s->io.fd < 0) {
			if (attempt && (e->adopt || transfer_over(e)))
				break;
			if (attempt)
				xfer_sched_wait(&e->sched, (int)retry_ms);
			if (transfer_over(e))
				break;
			int rc = stream_dial(s);
			if (rc == -EACCES || (rc && e->adopt && !attempt))
				break;
			if (rc)
				continue;
		}
		struct link *l = &e->links[s->link];
		atomic_fetch_add(&l->up, 1);
		int rc = stream_loop(s);
		/* the caller's buffers are pinned until the kernel reports every send */
		net_zc_reap(&s->zc, &s->io, rc ? 100 : 2000);
		atomic_fetch_add(&e->zc_bytes, s->zc.bytes);
		atomic_fetch_add(&e->zc_copied, s->zc.copied);
		s->zc.bytes = s->zc.copied = 0;
		if (rc == 0) {
			atomic_store(&s->state, ST_PARKED);
			xfer_sched_wake(&e->sched);
			return NULL;
		}
		if (atomic_load(&e->ended)) { /* cut on purpose: its copies were not needed */
			stream_close(s);
			break;
		}
		if (s == e->streams && atomic_load(&e->parts_open)) {
			/* the receiver takes parts only on the connection that sent the first */
			set_error(e, "lost the connection carrying the manifest: %s",
				  strerror(-rc));
			xfer_sched_abort(&e->sched, rc);
			parts_fail(e);
		}
		atomic_fetch_sub(&l->up, 1);
		atomic_fetch_add(&l->failed, 1);
		stream_close(s);
		xfer_sched_wake(&e->sched);
	}
	atomic_store(&s->state, ST_DEAD);
	xfer_sched_wake(&e->sched);
	return NULL;
}

/*
 * Which source address and interface link <l> leaves by: the one given (--from), else the
 * source the kernel's route to its receiver has, bound from then on, so that the link keeps
 * its NIC if the routes change while it runs (a link that goes down fails over to the other
 * links, never onto their NICs).
 */
static void link_route(struct link *l, int numa_off)
{
	struct xfer_path *p = &l->path;
	if (!p->has_local && net_route_source(&p->remote, &p->local) == 0) {
		char host[INET6_ADDRSTRLEN + 8];
		p->has_local = 1;
		snprintf(p->lname, sizeof(p->lname), "%.63s",
			 net_addr_host((const struct sockaddr *)&p->local.ss, host, sizeof(host)));
	}
	if (!p->has_local || net_iface_of(&p->local, &l->nic) < 0)
		l->nic = (struct net_iface){.numa_node = -1};
	xfer_place_plan(&l->place, l->nic.numa_node, numa_off);
}

/* Two links that leave by one interface (not loopback) share its bandwidth: the split by
 * measured rate gains nothing from the second. Said once per pair. */
static void links_share_nic(const struct xfer_engine *e)
{
	for (unsigned i = 0; i < e->nlinks; i++)
		for (unsigned j = i + 1; j < e->nlinks; j++) {
			const struct net_iface *a = &e->links[i].nic, *b = &e->links[j].nic;
			if (a->name[0] && !a->loopback && !strcmp(a->name, b->name))
				log_warn(
				    "xfer: links %u (%s) and %u (%s) both leave by %s: they share "
				    "its bandwidth; give receiver addresses routed over other "
				    "interfaces, or --from",
				    i + 1, e->links[i].path.rname, j + 1, e->links[j].path.rname,
				    a->name);
		}
}

static int parse_links(struct xfer_engine *e, const struct xfer_send_opts *o,
		       const struct xfer_path *given, int ngiven)
{
	struct xfer_path parsed[XFER_LINKS_MAX];
	const struct xfer_path *paths = given ? given : parsed;
	char err[200];
	int n =
	    given ? ngiven
		  : xfer_paths_parse(o->remote, o->local, parsed, XFER_LINKS_MAX, err, sizeof(err));
	if (n < 0 || n > XFER_LINKS_MAX) {
		set_error(e, "%s", n < 0 ? err : "too many links");
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		e->links[i].path = paths[i];
		link_route(&e->links[i], o->numa_off);
	}
	e->nlinks = (unsigned)n;
	links_share_nic(e);
	return 0;
}

/* Send part <p> of the manifest on <io>: 0 or -errno (the error set when it is too large). */
static int manifest_send(struct xfer_engine *e, struct net_conn *io, const struct xfer_manifest *p)
{
	uint8_t *enc = NULL;
	size_t len;
	int rc = xfer_manifest_encode(p, &enc, &len);
	if (rc) {
		set_error(e, "%s", "manifest too large");
		return rc;
	}
	rc = xfer_frame_send(io, XFER_MANIFEST, enc, (uint32_t)len);
	free(enc);
	return rc;
}

/*
 * Read the NEED that answers part <p> (its files as the manifest has them) into the part's
 * chunks (ids from <first_id> on). 0, or -errno with the error set when the receiver said why.
 */
static int need_recv(struct xfer_engine *e, struct net_conn *io, const struct xfer_manifest *p,
		     uint32_t first_id, uint32_t nchunks)
{
	uint8_t *meta = NULL, *needed = NULL;
	struct xfer_hdr h;
	/* the first byte may take long (the receiver re-hashes a resumed part); the frame, from
	 * it, has a deadline: a next hop trickling its NEED would hold a relay's thread, and the
	 * transfer's reservation, a read's timeout at a time */
	xfer_set_timeout(io->fd, XFER_FINISH_TIMEOUT_MS);
	int rc = xfer_frame_recv_timed(io, &h, &meta, e->need_frame_ms, e->need_min_rate);
	xfer_set_timeout(io->fd, (int)e->stall_ms);
	if (rc == -ETIMEDOUT && !e->error[0])
		set_error(e, "%s", "no whole answer (NEED) to a manifest part in time");
	if (rc)
		return rc;
	if (h.type == XFER_ERR) {
		char text[sizeof(e->error)];
		xfer_err_decode(meta, h.meta_len, text, sizeof(text));
		set_error(e, "receiver: %s", text);
		rc = -EIO;
	} else if (h.type != XFER_NEED || !(needed = malloc(nchunks ? nchunks : 1)) ||
		   xfer_need_decode(meta, h.meta_len, p, needed)) {
		rc = needed || h.type != XFER_NEED ? -EPROTO : -ENOMEM;
	} else {
		/* chunk ids are numbered file after file, as NEED lists them */
		for (uint32_t i = 0; i < nchunks; i++)
			ec(e, first_id + i)->need = needed[i];
	}
	free(needed);
	free(meta);
	return rc;
}

static int exchange_manifest(struct xfer_engine *e, struct net_conn *io,
			     const struct xfer_manifest *p, uint32_t first_id, uint32_t nchunks)
{
	int rc = manifest_send(e, io, p);
	return rc ? rc : need_recv(e, io, p, first_id, nchunks);
}

/*
 * Append the files of part <p> (and their sources <src>, copied) to the engine's tables, the
 * scheduler (absent until fed) and the open set: its chunks get the ids from *first_id on, and
 * <p>'s totals are set when it is the last. 0, or -errno with the error set.
 */
static int engine_append(struct xfer_engine *e, struct xfer_manifest *p,
			 const struct xfer_source *src, uint32_t *first_id, uint32_t *nchunks)
{
	uint64_t chunks = 0, bytes = 0;
	uint32_t nfiles = e->m.nfiles, id = atomic_load(&e->nchunks);
	for (uint32_t f = 0; f < p->nfiles; f++) {
		chunks += p->files[f].nchunks;
		bytes += p->files[f].size;
	}
	if ((uint64_t)id + chunks > XFER_CHUNKS_MAX) {
		/* chunk ids are 32-bit, and the scheduler's ring holds n + 1 */
		set_error(e, "more than 2^31 chunks in one transfer: use a larger --chunk-kib");
		return -E2BIG;
	}
	uint32_t *lens = malloc((chunks ? chunks : 1) * sizeof(*lens));
	if (!lens || xfer_table_grow(&e->fil, (uint64_t)nfiles + p->nfiles) ||
	    xfer_table_grow(&e->chk, (uint64_t)id + chunks) ||
	    (e->files.init && xfer_sources_add(&e->files, src, p->nfiles))) {
		free(lens);
		set_error(e, "%s", "out of memory");
		return -ENOMEM;
	}
	*first_id = id;
	*nchunks = (uint32_t)chunks;
	for (uint32_t f = 0; f < p->nfiles; f++) {
		*ef(e, nfiles + f) = (struct efile){.f = p->files[f], .first = id};
		for (uint32_t k = 0; k < p->files[f].nchunks; k++, id++) {
			*ec(e, id) = (struct echunk){.file = nfiles + f};
			uint32_t ff;
			uint64_t off;
			chunk_span(e, id, &ff, &off, &lens[id - *first_id]);
		}
	}
	/* the scheduler plans the end in bytes: every chunk's length, all under one lock */
	int rc = xfer_sched_grow(&e->sched, id, lens);
	free(lens);
	if (rc) {
		set_error(e, "%s", "out of memory");
		return rc;
	}
	for (unsigned i = 0; i < e->nlinks && src; i++)
		xfer_place_check_files(&e->links[i].place, src, p->nfiles, &e->links[i].nic, i);
	e->m.nfiles += p->nfiles;
	e->bytes_total += bytes;
	atomic_store_explicit(&e->nchunks, id, memory_order_release);
	if (p->last) {
		p->total_files = e->m.nfiles;
		p->total_bytes = e->bytes_total;
	}
	return 0;
}

/* What the receiver has of chunks [first, first + n) counts as skipped. */
static void count_skipped(struct xfer_engine *e, uint32_t first, uint32_t n)
{
	for (uint32_t id = first; id < first + n; id++)
		if (!ec(e, id)->need) {
			uint32_t f, len;
			uint64_t off;
			chunk_span(e, id, &f, &off, &len);
			e->bytes_skipped += len;
		}
}

/* Chunks [first, first + n) answered by the receiver: a relay's go to the scheduler as they
 * were fed already (the others when they are: xfer_engine_feed). */
static void relay_answered(struct xfer_engine *e, uint32_t first, uint32_t n)
{
	for (uint32_t id = first; id < first + n; id++) {
		struct echunk *c = ec(e, id);
		if (atomic_fetch_or(&c->st, CHUNK_ANSWERED) & CHUNK_FED)
			xfer_sched_add(&e->sched, id, !c->need);
	}
}

/* The manifest's first part goes on the first link that answers (or the first adopted
 * connection), on stream 0, which then carries chunks on that link (once the last part is
 * answered). 0, or -errno with the error set. */
static int engine_first_link(struct xfer_engine *e, const struct xfer_adopt *ad,
			     const struct xfer_manifest *p, uint32_t nchunks)
{
	int rc = -EHOSTUNREACH;
	struct stream *s = &e->streams[0];
	for (unsigned i = 0; i < (ad ? 1 : e->nlinks) && rc; i++) {
		s->link = i;
		if ((rc = stream_dial(s))) {
			if (rc == -EACCES)
				return rc;
			continue;
		}
		if ((rc = exchange_manifest(e, &s->io, p, 0, nchunks))) {
			stream_close(s);
			if (e->error[0])
				return rc;
		}
	}
	if (rc) {
		set_error(e, "cannot reach the receiver on any link: %s", strerror(-rc));
		return rc;
	}
	return 0;
}

static void stream_start(struct stream *s)
{
	if (pthread_create(&s->th, NULL, stream_main, s) == 0) {
		s->started = 1;
	} else {
		atomic_store(&s->state, ST_DEAD);
		if (s == s->e->streams && atomic_load(&s->e->parts_open)) {
			set_error(s->e, "%s", "cannot start a thread for the manifest's stream");
			xfer_sched_abort(&s->e->sched, -EAGAIN);
			parts_fail(s->e);
		}
	}
}

int xfer_engine_start(const struct xfer_send_opts *o, const struct xfer_adopt *ad,
		      const struct xfer_path *links, int nlinks, const struct xfer_manifest *m,
		      const struct xfer_source *src, unsigned flags, struct xfer_engine **out,
		      struct xfer_report *rep)
{
	int more = (flags & XFER_ENGINE_MORE) != 0;
	struct xfer_engine *e = calloc(1, sizeof(*e));
	struct xfer_manifest first = *m;
	uint32_t id0 = 0, nchunks = 0;
	int rc = -ENOMEM;
	memset(rep, 0, sizeof(*rep));
	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->err_mu, NULL);
	pthread_mutex_init(&e->parts_mu, NULL);
	pthread_cond_init(&e->parts_cv, NULL);
	e->cancel_fd = eventfd(0, EFD_CLOEXEC);
	e->parts_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	e->m = *m;
	e->m.nfiles = 0;
	e->m.files = NULL; /* the engine's files are in e->fil */
	xfer_table_init(&e->fil, sizeof(struct efile));
	xfer_table_init(&e->chk, sizeof(struct echunk));
	e->tp_ops = ad ? &xfer_tcp_ops : xfer_transport_pick();
	/* a relay sends from its parts (see receiver.c); the stand-in moves chunks only */
	e->batch = m->nfwd == 0 && e->tp_ops == &xfer_tcp_ops;
	e->t0_ns = clock_now_ns();
	e->per_link = o->streams ? o->streams : XFER_SEND_STREAMS;
	e->stall_ms = o->stall_ms ? o->stall_ms : XFER_SEND_STALL_MS;
	e->need_frame_ms = o->frame_ms ? o->frame_ms : XFER_SERVE_FRAME_MS;
	e->need_min_rate = 1024ull * (o->min_rate_kib ? o->min_rate_kib : XFER_SERVE_MIN_RATE_KIB);
	e->progress_ms = o->progress_ms ? o->progress_ms : 250;
	e->progress = o->progress;
	e->arg = o->arg;
	e->listing = more;
	e->singly = (flags & XFER_ENGINE_RELAY) != 0;
	atomic_init(&e->parts_open, more);
	first.last = !more;
	if ((rc = xfer_sched_init(&e->sched, 0)))
		goto fail;
	if (more)
		xfer_sched_open(&e->sched);
	if (o->token_file) {
		const char *why;
		if ((rc = xfer_token_load(o->token_file, &e->token, &why))) {
			set_error(e, "token: %s", why);
			goto fail;
		}
	}
	if (o->tls && !ad) {
		struct net_tls_opts t = {.ca = o->tls_ca,
					 .cert = o->tls_cert,
					 .key = o->tls_key,
					 .insecure = o->tls_insecure};
		char err[256];
		if ((rc = net_tls_ctx_client(&t, &e->tls, err, sizeof(err)))) {
			set_error(e, "%s", err);
			goto fail;
		}
	}
	e->adopt = ad;
	if (ad) {
		e->nlinks = ad->nlinks;
		for (unsigned i = 0; i < ad->nlinks; i++)
			snprintf(e->links[i].path.rname, sizeof(e->links[i].path.rname), "%s",
				 ad->names[i]);
	} else if ((rc = parse_links(e, o, links, nlinks))) {
		goto fail;
	}
	if (RAND_bytes(e->session, sizeof(e->session)) != 1) {
		rc = -EIO;
		goto fail;
	}
	e->nstreams = ad ? ad->max_streams : e->nlinks * e->per_link;
	e->streams = calloc(e->nstreams, sizeof(*e->streams));
	/* a file at a time per stream, and a few kept open for their next chunks */
	if (!e->streams || xfer_sources_init(&e->files, NULL, 0, e->nstreams + 4)) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = engine_append(e, &first, src, &id0, &nchunks)))
		goto fail;
	for (unsigned i = 0; i < e->nstreams; i++) {
		e->streams[i] = (struct stream){.e = e, .link = i % e->nlinks, .io = {.fd = -1}};
		atomic_init(&e->streams[i].state, ST_RUNNING);
		atomic_init(&e->streams[i].live_fd, -1);
	}
	/* every stream but the manifest's dials now, while the manifest is answered: each link
	 * carries chunks as soon as they are fed (adopted connections come one by one) */
	for (unsigned i = 1; i < e->nstreams && !ad; i++)
		stream_start(&e->streams[i]);
	if ((rc = engine_first_link(e, ad, &first, nchunks)))
		goto fail;
	count_skipped(e, 0, nchunks);
	if (e->singly)
		relay_answered(e, 0, nchunks); /* nothing fed yet */
	e->parts = 1;
	/* stream 0 carries chunks at once; while parts are still to come, it sends them too */
	for (unsigned i = 0; i < (ad ? e->nstreams : 1); i++)
		stream_start(&e->streams[i]);
	if (!more)
		e->t_listed_ns = clock_now_ns();
	*out = e;
	return 0;
fail:
	snprintf(rep->error, sizeof(rep->error), "%s", e->error[0] ? e->error : strerror(-rc));
	xfer_engine_free(e);
	return rc;
}

/* A part answered (its NEED read into its chunks): what the receiver has counts as skipped,
 * the rest goes to the streams. */
static int feed_run(struct xfer_engine *e, uint32_t first, uint32_t n)
{
	uint8_t *have = malloc(n ? n : 1);
	if (!have)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		have[i] = !ec(e, first + i)->need;
	/* all at once: a stream that took the first alone would send it as a chunk, not in a
	 * batch with the small files behind it */
	xfer_sched_add_run(&e->sched, first, n, have);
	free(have);
	return 0;
}

static int part_answered(struct xfer_engine *e, const struct part_out *po)
{
	count_skipped(e, po->first_id, po->nchunks);
	atomic_fetch_add(&e->parts, 1);
	if (e->singly) {
		relay_answered(e, po->first_id, po->nchunks);
		return 0;
	}
	return feed_run(e, po->first_id, po->nchunks);
}

/* The NEED of part <po>, read on the manifest's connection: 0 or -errno. */
static int part_need(struct xfer_engine *e, const struct part_out *po)
{
	struct xfer_manifest view = {
	    .chunk_size = e->m.chunk_size,
	    .nfiles = po->nfiles,
	    .files = malloc((po->nfiles ? po->nfiles : 1) * sizeof(struct xfer_file))};
	if (!view.files)
		return -ENOMEM;
	for (uint32_t f = 0; f < po->nfiles; f++)
		view.files[f] = ef(e, po->first_file + f)->f;
	int rc = need_recv(e, &e->streams[0].io, &view, po->first_id, po->nchunks);
	free(view.files);
	return rc;
}

/* Stream 0: send the parts listed and not sent yet, each taking its place in the window (its
 * NEED comes back in its turn among the acknowledgements). 0 or -errno. */
static int parts_send(struct stream *s, struct unit *win, unsigned *nwin)
{
	struct xfer_engine *e = s->e;
	int rc = 0;
	pthread_mutex_lock(&e->parts_mu);
	while (!rc && e->nsent < e->nout) {
		struct part_out *po = &e->out[e->nsent]; /* only this thread moves out[] */
		pthread_mutex_unlock(&e->parts_mu);
		rc = xfer_frame_send(&s->io, XFER_MANIFEST, po->enc, (uint32_t)po->len);
		pthread_mutex_lock(&e->parts_mu);
		if (!rc) {
			free(po->enc);
			po->enc = NULL;
			e->nsent++;
			win[(*nwin)++] = (struct unit){.n = 0};
		}
	}
	pthread_mutex_unlock(&e->parts_mu);
	return rc;
}

/*
 * Stream 0: the oldest part sent is next to be answered. While its NEED is not in (the receiver
 * looks at the part's files), wait for it or for a part to send (*woken set: send it, then wait
 * again); then read it and feed that part's chunks. The last part's NEED ends the listing on
 * this connection. 0 or -errno.
 */
static int part_read(struct stream *s, int *woken)
{
	struct xfer_engine *e = s->e;
	if (!net_conn_pending(&s->io)) {
		struct pollfd pf[2] = {{.fd = s->io.fd, .events = POLLIN},
				       {.fd = e->parts_fd, .events = POLLIN}};
		int n = poll(pf, 2, XFER_FINISH_TIMEOUT_MS); /* a resumed part is re-hashed */
		if (n < 0)
			return errno == EINTR ? (*woken = 1, 0) : -errno;
		if (n == 0)
			return -ETIMEDOUT;
		if (pf[1].revents & POLLIN) {
			uint64_t v;
			ssize_t got = read(e->parts_fd, &v, sizeof(v));
			(void)got; /* drained; a part queued meanwhile writes it again */
		}
		if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			*woken = 1;
			return 0;
		}
	}
	pthread_mutex_lock(&e->parts_mu);
	struct part_out po = e->out[0];
	pthread_mutex_unlock(&e->parts_mu);
	int rc = part_need(e, &po);
	if (!rc)
		rc = part_answered(e, &po);
	if (rc) {
		if (!e->error[0])
			set_error(e, "lost the connection carrying the manifest: %s",
				  strerror(-rc));
		return rc;
	}
	pthread_mutex_lock(&e->parts_mu);
	memmove(e->out, e->out + 1, (e->nout - 1) * sizeof(e->out[0]));
	e->nout--;
	e->nsent--;
	if (po.last)
		atomic_store(&e->parts_open, 0);
	pthread_cond_broadcast(&e->parts_cv);
	pthread_mutex_unlock(&e->parts_mu);
	return 0;
}

/*
 * Queue part <p> (appended already as <po>) for stream 0 to send between its chunks, once fewer
 * than XFER_PARTS_AHEAD parts wait for their NEED: the caller lists on meanwhile. One thread
 * reads and writes the connection (TLS allows no more). 0 or -errno.
 */
static int part_queue(struct xfer_engine *e, const struct xfer_manifest *p, struct part_out *po)
{
	int rc = xfer_manifest_encode(p, &po->enc, &po->len);
	if (rc) {
		set_error(e, "%s", "manifest too large");
		return rc;
	}
	pthread_mutex_lock(&e->parts_mu);
	while (e->nout == XFER_PARTS_AHEAD && !e->parts_failed)
		pthread_cond_wait(&e->parts_cv, &e->parts_mu);
	if (e->parts_failed) {
		rc = -EIO;
		free(po->enc);
	} else {
		e->out[e->nout++] = *po;
	}
	pthread_mutex_unlock(&e->parts_mu);
	if (!rc) {
		uint64_t one = 1;
		ssize_t n = write(e->parts_fd, &one, sizeof(one));
		(void)n;		    /* an eventfd write cannot fail short of overflow */
		xfer_sched_wake(&e->sched); /* stream 0 may be waiting for chunks */
	}
	return rc;
}

int xfer_engine_list(struct xfer_engine *e, struct xfer_manifest *p, const struct xfer_source *src,
		     struct xfer_report *rep)
{
	struct part_out po = {.first_file = e->m.nfiles, .nfiles = p->nfiles, .last = p->last};
	int rc = -EINVAL;
	p->chunk_size = e->m.chunk_size;
	p->nfwd = 0; /* the hops are in the first part */
	pthread_mutex_lock(&e->sched.mu);
	int failed = e->sched.error;
	pthread_mutex_unlock(&e->sched.mu);
	if (failed) {
		rc = failed;
		set_error(e, "%s", strerror(-failed));
	} else if (!e->listing) {
		set_error(e, "%s", "the manifest was complete already");
	} else if (!(rc = engine_append(e, p, src, &po.first_id, &po.nchunks)) &&
		   (rc = part_queue(e, p, &po)) && !e->error[0]) {
		set_error(e, "lost the connection carrying the manifest: %s", strerror(-rc));
	}
	if (!rc && p->last) {
		/* every part answered: then the scheduler closes */
		pthread_mutex_lock(&e->parts_mu);
		while (e->nout && !e->parts_failed)
			pthread_cond_wait(&e->parts_cv, &e->parts_mu);
		int lost = e->parts_failed;
		pthread_mutex_unlock(&e->parts_mu);
		pthread_mutex_lock(&e->sched.mu);
		rc = e->sched.error ? e->sched.error : lost ? -EIO : 0;
		pthread_mutex_unlock(&e->sched.mu);
		if (rc && !e->error[0])
			set_error(e, "%s", strerror(-rc));
	}
	if (rc) {
		xfer_sched_abort(&e->sched, rc);
		snprintf(rep->error, sizeof(rep->error), "%s", e->error);
		return rc;
	}
	if (p->last) {
		e->listing = 0;
		e->t_listed_ns = clock_now_ns();
		xfer_sched_close(&e->sched);
	}
	return 0;
}

void xfer_engine_feed(struct xfer_engine *e, uint32_t f, uint32_t k, uint64_t hash, int known)
{
	uint32_t id = ef(e, f)->first + k;
	struct echunk *c = ec(e, id);
	if (known) {
		c->hash = hash;
		atomic_store_explicit(&c->known, 1, memory_order_release);
	}
	if (e->singly && !(atomic_fetch_or(&c->st, CHUNK_FED) & CHUNK_ANSWERED))
		return; /* its part's NEED is not in yet: fed once it is */
	xfer_sched_add(&e->sched, id, !c->need);
}

static void fill_report(struct xfer_engine *e, struct xfer_report *r, int final);

void xfer_engine_tick(struct xfer_engine *e, struct xfer_report *rep)
{
	uint64_t now = clock_now_ns();
	if (!e->progress || now < e->next_progress_ns)
		return;
	e->next_progress_ns = now + (uint64_t)e->progress_ms * 1000000;
	fill_report(e, rep, 0);
	e->progress(rep, e->arg);
}

int xfer_engine_feed_files(struct xfer_engine *e, uint32_t nfiles)
{
	return feed_run(e, 0, nfiles ? ef(e, nfiles - 1)->first + ef(e, nfiles - 1)->f.nchunks : 0);
}

void xfer_engine_abort(struct xfer_engine *e, int err, const char *why)
{
	set_error(e, "%s", why);
	xfer_sched_abort(&e->sched, err);
}

static void fill_report(struct xfer_engine *e, struct xfer_report *r, int final)
{
	uint64_t now = clock_now_ns();
	double secs = (double)(now - e->t0_ns) / 1e9;
	r->bytes_total = e->bytes_total;
	r->bytes_skipped = e->bytes_skipped;
	r->bytes_sent = atomic_load(&e->bytes_sent);
	r->bytes_acked = atomic_load(&e->bytes_acked);
	r->bytes_dup = r->bytes_sent > r->bytes_acked ? r->bytes_sent - r->bytes_acked : 0;
	r->files = e->m.nfiles;
	r->chunks = atomic_load(&e->nchunks);
	r->listing = e->listing;
	r->parts = e->parts;
	r->listing_seconds = (double)((e->t_listed_ns ? e->t_listed_ns : now) - e->t0_ns) / 1e9;
	pthread_mutex_lock(&e->sched.mu);
	r->chunks_resent = e->sched.resends;
	r->chunks_dup = e->sched.dups;
	pthread_mutex_unlock(&e->sched.mu);
	r->chunks_bad = atomic_load(&e->chunks_bad);
	r->zc_bytes = atomic_load(&e->zc_bytes);
	r->zc_copied_bytes = atomic_load(&e->zc_copied);
	r->seconds = secs;
	r->nlinks = e->nlinks;
	for (unsigned i = 0; i < e->nlinks; i++) {
		struct link *l = &e->links[i];
		struct xfer_link_report *lr = &r->links[i];
		snprintf(lr->local, sizeof(lr->local), "%s", l->path.lname);
		snprintf(lr->remote, sizeof(lr->remote), "%s", l->path.rname);
		snprintf(lr->iface, sizeof(lr->iface), "%s", l->nic.name);
		lr->numa_node = l->nic.numa_node;
		xfer_place_cpus(&l->place, lr->cpus, sizeof(lr->cpus));
		lr->bytes = atomic_load(&l->bytes);
		lr->sent = atomic_load(&l->sent);
		lr->dups = atomic_load(&l->dups);
		lr->up = atomic_load(&l->up);
		lr->failed = atomic_load(&l->failed);
		if (final) {
			lr->gbps = secs > 0 ? (double)lr->bytes * 8 / secs / 1e9 : 0;
		} else {
			double inst = (double)(lr->bytes - l->last_bytes) * 8 /
				      (e->progress_ms / 1000.0) / 1e9;
			l->gbps = l->last_bytes || l->gbps ? 0.5 * l->gbps + 0.5 * inst : inst;
			l->last_bytes = lr->bytes;
			lr->gbps = l->gbps;
		}
	}
	snprintf(r->error, sizeof(r->error), "%s", e->error);
}

/* Streams waiting for a connect give up at once (the eventfd turns readable for good). */
static void stop_dialing(struct xfer_engine *e)
{
	uint64_t one = 1;
	ssize_t n = write(e->cancel_fd, &one, sizeof(one));
	(void)n; /* an eventfd write cannot fail short of overflow; dials time out anyway */
}

static unsigned streams_alive(struct xfer_engine *e)
{
	unsigned n = 0;
	for (unsigned i = 0; i < e->nstreams; i++)
		n += atomic_load(&e->streams[i].state) != ST_DEAD;
	return n;
}

static unsigned streams_up(struct xfer_engine *e)
{
	unsigned n = 0;
	for (unsigned i = 0; i < e->nlinks; i++)
		n += atomic_load(&e->links[i].up);
	return n;
}

/* FINISH's meta, every file's whole hash (in *meta, malloc'd): chunks not sent in this run
 * (the receiver had them) are hashed from the file now. 0, or -errno with the error set. */
static int whole_hashes(struct xfer_engine *e, uint8_t **meta)
{
	size_t len = (size_t)e->m.nfiles * XFER_WHOLE_HASH_LEN;
	uint8_t *out = malloc(len ? len : 1);
	if (!out)
		return -ENOMEM;
	uint64_t *hashes = NULL;
	size_t cap = 0;
	for (uint32_t f = 0; f < e->m.nfiles; f++) {
		uint32_t k = 0, n = ef(e, f)->f.nchunks, first = ef(e, f)->first;
		while (k < n && atomic_load(&ec(e, first + k)->known))
			k++;
		if (k < n) {
			struct xfer_open o;
			int rc = source_get(e, f, &o);
			if (rc) {
				free(out);
				free(hashes);
				return rc;
			}
			for (; k < n; k++)
				chunk_hash(e, first + k, o.buf);
			xfer_sources_put(&e->files, f);
		}
		if (n > cap) {
			uint64_t *h = realloc(hashes, n * sizeof(*h));
			if (!h) {
				free(out);
				free(hashes);
				return -ENOMEM;
			}
			hashes = h;
			cap = n;
		}
		for (k = 0; k < n; k++) /* the table's entries need not be consecutive */
			hashes[k] = ec(e, first + k)->hash;
		xfer_whole_hash(hashes, n, out + XFER_WHOLE_HASH_LEN * (size_t)f);
	}
	free(hashes);
	*meta = out;
	return 0;
}

/* FINISH (<meta>) on a parked stream (or a fresh connection), then wait for DONE. */
static int finish_on(struct xfer_engine *e, struct net_conn *io, const uint8_t *meta)
{
	size_t len = (size_t)e->m.nfiles * XFER_WHOLE_HASH_LEN;
	int rc = xfer_frame_send(io, XFER_FINISH, meta, (uint32_t)len);
	if (rc)
		return rc;
	xfer_set_timeout(io->fd, XFER_FINISH_TIMEOUT_MS);
	struct xfer_hdr h;
	uint8_t raw[300];
	char text[sizeof(raw)];
	if ((rc = xfer_frame_recv(io, &h, raw, sizeof(raw) - 1)))
		return rc;
	if (h.type == XFER_DONE)
		return 0;
	if (h.type == XFER_ERR) {
		xfer_err_decode(raw, h.meta_len, text, sizeof(text));
		set_error(e, "receiver: %s", text);
		return -EBADMSG;
	}
	return -EPROTO;
}

int xfer_engine_finish(struct xfer_engine *e, struct xfer_report *rep)
{
	uint64_t next = clock_now_ns() + (uint64_t)e->progress_ms * 1000000, none_since = 0;
	/* with no stream connected for this long, the receiver is gone (or every link is) */
	uint64_t give_up_ns = (uint64_t)(2 * e->stall_ms > 3000 ? 2 * e->stall_ms : 3000) * 1000000;
	int rc = 0;
	for (;;) {
		pthread_mutex_lock(&e->sched.mu);
		int done = e->sched.done == e->sched.n && !e->sched.open, err = e->sched.error;
		pthread_mutex_unlock(&e->sched.mu);
		if (done)
			break;
		if (err) {
			rc = err;
			break;
		}
		uint64_t now = clock_now_ns();
		if (streams_up(e))
			none_since = 0;
		else if (!none_since)
			none_since = now;
		if (!streams_alive(e) || (none_since && now - none_since > give_up_ns)) {
			set_error(
			    e, "%s",
			    "lost every stream to the receiver (all links down or receiver gone)");
			rc = -ECONNRESET;
			xfer_sched_abort(&e->sched, rc);
			break;
		}
		if (clock_now_ns() >= next) {
			next += (uint64_t)e->progress_ms * 1000000;
			if (e->progress) {
				fill_report(e, rep, 0);
				e->progress(rep, e->arg);
			}
		}
		xfer_sched_wait(&e->sched, (int)e->progress_ms);
	}
	stop_dialing(e);
	if (!rc) {
		/* a stream still holding chunks holds copies whose twins were acknowledged:
		 * waiting for them would let the slowest link set the finish time again. Not
		 * stream 0: its connection carried the manifest, and the receiver keeps the
		 * transfer (which FINISH names) while a connection that joined it is open */
		atomic_store(&e->ended, 1);
		for (unsigned i = 1; i < e->nstreams; i++)
			if (atomic_load(&e->streams[i].holding))
				stream_abort(&e->streams[i]);
	}
	for (unsigned i = 0; i < e->nstreams; i++)
		if (e->streams[i].started) {
			if (rc)
				stream_abort(&e->streams[i]);
			pthread_join(e->streams[i].th, NULL);
			e->streams[i].started = 0;
		}
	uint8_t *meta = NULL;
	if (!rc && !(rc = whole_hashes(e, &meta))) {
		rc = -ECONNRESET;
		for (unsigned i = 0; i < e->nstreams && rc; i++) {
			struct stream *s = &e->streams[i];
			if (atomic_load(&s->state) == ST_PARKED && s->io.fd >= 0)
				rc = finish_on(e, &s->io, meta);
		}
		for (unsigned i = 0; i < e->nstreams && rc && rc != -EBADMSG; i++) {
			struct stream *s = &e->streams[i];
			stream_close(s);
			if (stream_dial(s) == 0)
				rc = finish_on(e, &s->io, meta);
		}
		if (rc && !e->error[0])
			set_error(e, "could not confirm the end of the transfer: %s",
				  strerror(-rc));
	}
	free(meta);
	fill_report(e, rep, 1);
	return rc;
}

void xfer_engine_free(struct xfer_engine *e)
{
	if (!e)
		return;
	if (e->streams) {
		xfer_sched_abort(&e->sched, -ECANCELED);
		stop_dialing(e);
		for (unsigned i = 0; i < e->nstreams; i++) {
			stream_abort(&e->streams[i]);
			if (e->streams[i].started)
				pthread_join(e->streams[i].th, NULL);
			stream_close(&e->streams[i]);
			if (e->streams[i].tp.ops)
				e->streams[i].tp.ops->close(&e->streams[i].tp);
			free(e->streams[i].batch);
		}
	}
	if (e->sched.slots)
		xfer_sched_destroy(&e->sched);
	free(e->streams);
	xfer_sources_free(&e->files);
	xfer_table_free(&e->fil);
	xfer_table_free(&e->chk);
	OPENSSL_cleanse(&e->token, sizeof(e->token));
	if (e->tls)
		net_tls_ctx_free(e->tls);
	if (e->cancel_fd >= 0)
		close(e->cancel_fd);
	if (e->parts_fd >= 0)
		close(e->parts_fd);
	for (unsigned i = 0; i < e->nout; i++)
		free(e->out[i].enc);
	pthread_mutex_destroy(&e->err_mu);
	pthread_mutex_destroy(&e->parts_mu);
	pthread_cond_destroy(&e->parts_cv);
	free(e);
}
