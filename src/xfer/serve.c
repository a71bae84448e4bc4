/*
 * serve.c - xfer_serve(): the receiving daemon, and xfer_get()'s receiving side.
 *
 * One thread accepts on every listen address (one per link); each connection gets a thread
 * that says CHALLENGE, checks the HELLO's token, then serves frames: MANIFEST opens or joins
 * the session named by the HELLO (the files are looked at, space is reserved and NEED
 * answered); CHUNK is read whole, hashed, written to its part and acknowledged; FINISH
 * completes every file and answers DONE. Sessions are shared by all the connections of one
 * transfer, across links, and live as long as one of them does; what survives a session is
 * on disk (see store.h).
 *
 * Who may use it: serve needs a token or a client CA unless told --insecure. The accept loop
 * holds the caps (connections in all and per address: over them a connection gets ERR and is
 * closed; a `get` connection handed to a pull counts until the pull closes it), cuts a handshake at its total deadline however slowly it trickles, and, out of
 * descriptors, stops polling the listeners until a connection ends (an eventfd) or a second
 * passes, rather than spinning. A manifest is refused before anything is created when it has
 * too many files, a name twice, a bcast hop outside --relay-to (its names resolved once: the
 * addresses checked are the ones dialed), more bytes than the free space less what live
 * sessions reserved, or, pulling, a name the client did not ask for.
 * --metrics is answered on its own thread.
 *
 * Chunks: a verified chunk is never written again; writers of one chunk are counted, and a
 * chunk that had two at once is re-hashed at FINISH (store.h), after connections still
 * writing into verified chunks are ended.
 *
 * bcast: a manifest with further hops makes this receiver also a sender. Before answering
 * NEED it starts an engine to the next hop (with the remaining hops), and feeds it each chunk
 * once written, so chunks flow down the chain as they arrive; DONE goes upstream only when
 * the next hop said DONE.
 */
#include "accelnet/xfer.h"
#include "core/clock.h"
#include "core/log.h"
#include "net/addr.h"
#include "net/sock.h"
#include "net/tls.h"
#include "xfer/conn.h"
#include "xfer/engine.h"
#include "xfer/store.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define SERVE_IDLE_MS 300000
#define SERVE_FINISH_WAIT_S 60 /* FINISH waits this long for a chunk's last writer to let go */
#define SERVE_MAX_LISTEN XFER_LINKS_MAX
#define SERVE_ACCEPT_PAUSE_MS 1000 /* out of descriptors: accept again after this, or sooner */

/* A connection receiving a chunk into a part (on its stack, listed under the session's mu). */
struct writer {
	struct writer *next;
	int fd;
	uint32_t file, chunk;
};

struct session {
	struct session *next;
	struct writer *writers; /* under mu */
	uint8_t id[XFER_SESSION_LEN];
	unsigned refs;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* under mu: a chunk's writer finished */
	uint64_t reserved; /* bytes of free space counted as this transfer's (under srv->mu) */
	struct xfer_manifest m;
	struct xfer_store_file *files;
	uint32_t nopen;
	struct xfer_engine *relay;
	struct xfer_manifest relay_m;
	struct xfer_path hop[XFER_LINKS_MAX]; /* the next bcast hop, resolved and checked once */
	int nhop;
	int finished;
};

#define PULL_MAX_STREAMS 64

/* A GET being answered: the client's connections wait here until a stream adopts them. */
struct pull {
	struct pull *next;
	uint8_t id[XFER_SESSION_LEN];
	struct server *srv;
	struct net_conn ios[PULL_MAX_STREAMS];
	unsigned links[PULL_MAX_STREAMS];
	uint64_t live_ids[PULL_MAX_STREAMS]; /* each still counted until pull_put() closes it */
	unsigned head, tail; /* fds[head..tail) wait */
	unsigned expected;   /* connections the client said it opens */
	int closed;
	pthread_cond_t cv; /* under srv->mu */
};

/* An open connection: its descriptor, its peer's address (for the per-address cap), and the
 * time its handshake must be over by (0: over). Found by id, never by descriptor number (a
 * number is reused as soon as it is closed); removed before the descriptor is closed, and the
 * count it holds given back after. */
struct live {
	uint64_t id;
	int fd;
	sa_family_t family;
	uint8_t addr[16];
	uint64_t deadline_ms;
};

struct server {
	const struct xfer_serve_opts *o;
	unsigned max_conns, max_per_addr, max_files;
	int handshake_ms;
	struct net_cidr relay[64]; /* --relay-to */
	unsigned nrelay;
	const char *const *asked; /* puller: the names it asked for */
	unsigned nasked;
	uint64_t reserved; /* bytes reserved by live sessions (under mu) */
	int wake_fd;	   /* an eventfd: a connection ended while accepting was paused */
	_Atomic int accept_paused;
	int dirfd;
	int puller; /* this is `xfer get`'s receiving side, not a daemon */
	struct ssl_ctx_st *tls; /* accept TLS transfers */
	int tls_required;	/* mutual TLS: plain connections are refused */
	struct pull *pulls;
	unsigned nlisten;
	char listen_names[XFER_LINKS_MAX][64];
	_Atomic uint64_t link_bytes[XFER_LINKS_MAX];
	/* transfers that ended, and why: a stream arriving after its session is gone gets the
	 * cause, not "no such transfer", and a late GET does not start over (the last 8) */
	struct {
		uint8_t id[XFER_SESSION_LEN];
		char why[200];
	} tombs[8];
	unsigned ntombs;
	int done_ok;	     /* puller: DONE was sent */
	uint64_t total_bytes; /* puller: the manifest's size */
	char peer_err[256]; /* puller: why the pull failed (the server's ERR, or our refusal) */
	struct xfer_token token;
	pthread_mutex_t mu;
	struct session *sessions;
	unsigned conns;	  /* open connections, handed over to a pull or not (under mu) */
	unsigned threads; /* connection threads running (under mu) */
	pthread_cond_t conns_cv;
	struct live *live;
	unsigned nlive, cap_live;
	uint64_t live_seq;
	unsigned corrupt_every; /* fault injection for tests: ACCELNET_XFER_CORRUPT_EVERY */
	_Atomic uint64_t corrupt_seq;
	/* metrics */
	_Atomic uint64_t m_bytes, m_chunks, m_dup, m_bad, m_files, m_sessions, m_auth_fail, m_errors,
		m_conns_total;
};

struct conn {
	struct server *srv;
	struct net_conn io;
	unsigned link; /* the listener (or, pulling, the link) it came by */
	uint64_t live_id;
	struct session *sess;
};

static void peer_key(const struct sockaddr_storage *ss, sa_family_t *family, uint8_t addr[16])
{
	memset(addr, 0, 16);
	*family = ss->ss_family;
	if (ss->ss_family == AF_INET)
		memcpy(addr, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	else if (ss->ss_family == AF_INET6)
		memcpy(addr, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
}

/*
 * Count a new connection from <peer> unless a cap says no: NULL, or why not (under the
 * caps, the connection is counted, listed as *id, and its handshake must end within
 * handshake_ms). It stays counted until live_unlist() and live_release() (see struct live).
 */
static const char *live_admit(struct server *s, int fd, const struct sockaddr_storage *peer, uint64_t *id)
{
	static const char *const full_all = "too many connections to this server (serve --max-conns)";
	static const char *const full_addr = "too many connections from your address (serve --max-conns-per-addr)";
	struct live l = {.fd = fd, .deadline_ms = clock_now_ms() + (uint64_t)s->handshake_ms};
	const char *why = NULL;
	peer_key(peer, &l.family, l.addr);
	pthread_mutex_lock(&s->mu);
	unsigned same = 0;
	for (unsigned i = 0; i < s->nlive; i++)
		same += s->live[i].family == l.family && !memcmp(s->live[i].addr, l.addr, 16);
	if (s->conns >= s->max_conns)
		why = full_all;
	else if (same >= s->max_per_addr)
		why = full_addr;
	if (!why && s->nlive == s->cap_live) {
		unsigned cap = s->cap_live ? 2 * s->cap_live : 64;
		struct live *v = realloc(s->live, cap * sizeof(*v));
		if (v) {
			s->live = v;
			s->cap_live = cap;
		} else {
			why = "out of memory";
		}
	}
	if (!why) {
		l.id = *id = ++s->live_seq;
		s->live[s->nlive++] = l;
		s->conns++;
	}
	pthread_mutex_unlock(&s->mu);
	return why;
}

/* The handshake of connection <id> is over (either way): the deadline no longer applies. */
static void live_settle(struct server *s, uint64_t id)
{
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i].id == id)
			s->live[i].deadline_ms = 0;
	pthread_mutex_unlock(&s->mu);
}

/* Cut off the connections whose handshake ran past its deadline (however they trickle). */
static void live_expire(struct server *s, uint64_t now)
{
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i].deadline_ms && now >= s->live[i].deadline_ms) {
			shutdown(s->live[i].fd, SHUT_RDWR);
			s->live[i].deadline_ms = 0;
		}
	pthread_mutex_unlock(&s->mu);
}

/* Before closing connection <id>: it leaves the list (nothing may touch its descriptor now). */
static void live_unlist_locked(struct server *s, uint64_t id)
{
	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i].id == id) {
			s->live[i] = s->live[--s->nlive];
			break;
		}
}

static void live_unlist(struct server *s, uint64_t id)
{
	pthread_mutex_lock(&s->mu);
	live_unlist_locked(s, id);
	pthread_mutex_unlock(&s->mu);
}

/* After closing a connection: its count goes back, and a paused accept loop may go on. */
static void live_release(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	s->conns--;
	if (atomic_load(&s->accept_paused)) { /* a descriptor is free: accept again */
		uint64_t one = 1;
		ssize_t n = write(s->wake_fd, &one, sizeof(one));
		(void)n; /* the accept loop also resumes on its timer */
	}
	pthread_cond_broadcast(&s->conns_cv);
	pthread_mutex_unlock(&s->mu);
}

/* Over a cap: say why (without blocking) and close. */
static void refuse_conn(int fd, const char *why)
{
	struct net_conn c;
	uint8_t out[XFER_HDR_LEN + 128], sink[256];
	size_t len = strlen(why) < 128 ? strlen(why) : 128;
	xfer_hdr_encode(out, XFER_ERR, (uint32_t)len, 0);
	memcpy(out + XFER_HDR_LEN, why, len);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	net_conn_init(&c, fd);
	ssize_t n = net_conn_write(&c, out, XFER_HDR_LEN + len);
	(void)n; /* best effort: the close says the rest */
	net_conn_shutdown(&c);
	while (net_conn_read(&c, sink, sizeof(sink)) > 0)
		;
	net_conn_close(&c);
}

/*
 * Every address of a bcast hop ("HOST:PORT[,...]") inside --relay-to: the number of addresses,
 * resolved into <paths> (the engine dials those, never resolving the names again: a second
 * answer need not be the first), or -EINVAL / -EPERM with the reason in <err>.
 */
static int relay_allowed(const struct server *s, const char *hop, struct xfer_path *paths, char *err,
			 size_t errlen)
{
	char why[200];
	int n = xfer_paths_parse(hop, NULL, paths, XFER_LINKS_MAX, why, sizeof(why));
	if (n < 0) {
		snprintf(err, errlen, "bad bcast hop '%.100s': %s", hop, why);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		if (!net_cidr_match(s->relay, s->nrelay,
				    (const struct sockaddr *)&paths[i].remote.ss)) {
			snprintf(err, errlen, "this %s does not relay to %s (a server allows bcast hops with --relay-to)",
				 s->puller ? "client" : "server", paths[i].rname);
			return -EPERM;
		}
	}
	return n;
}

static int send_err(struct net_conn *io, const char *msg)
{
	return xfer_frame_send(io, XFER_ERR, msg, (uint32_t)strlen(msg));
}

/* The receiving side refuses something: tell the peer, and, pulling, remember it as the
 * reason the pull failed. */
static void refuse(struct server *s, struct net_conn *io, const char *msg)
{
	if (s->puller) {
		pthread_mutex_lock(&s->mu);
		if (!s->peer_err[0])
			snprintf(s->peer_err, sizeof(s->peer_err), "%s", msg);
		pthread_mutex_unlock(&s->mu);
	}
	send_err(io, msg);
}

/* Give back up to <bytes> of a session's reservation (under s->mu). */
static void unreserve_locked(struct server *s, struct session *ss, uint64_t bytes)
{
	uint64_t d = bytes < ss->reserved ? bytes : ss->reserved;
	ss->reserved -= d;
	s->reserved -= d;
}

static void session_free(struct server *s, struct session *ss, int refused)
{
	if (ss->relay) {
		if (!ss->finished)
			xfer_engine_abort(ss->relay, -ECONNRESET, "upstream went away");
		xfer_engine_free(ss->relay);
	}
	for (uint32_t i = 0; i < ss->nopen; i++) {
		if (refused)
			xfer_store_discard(s->dirfd, &ss->files[i]);
		xfer_store_close(&ss->files[i]);
	}
	pthread_mutex_lock(&s->mu);
	unreserve_locked(s, ss, ss->reserved);
	pthread_mutex_unlock(&s->mu);
	free(ss->files);
	xfer_manifest_free(&ss->m);
	pthread_cond_destroy(&ss->cv);
	pthread_mutex_destroy(&ss->mu);
	free(ss);
}

static void session_put(struct server *s, struct session *ss)
{
	pthread_mutex_lock(&s->mu);
	int last = --ss->refs == 0;
	if (last)
		for (struct session **p = &s->sessions; *p; p = &(*p)->next)
			if (*p == ss) {
				*p = ss->next;
				break;
			}
	pthread_mutex_unlock(&s->mu);
	if (last)
		session_free(s, ss, 0);
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * What a manifest may ask before anything is looked at (at most max_files files is checked
 * by the decoder, as soon as it reads the count): no name twice, bcast hops only inside --relay-to, and for `get` only names that were asked for.
 * 0, or -errno with the reason in <err>.
 */
static int manifest_admit(const struct server *s, struct session *ss, char *err, size_t errlen)
{
	const struct xfer_manifest *m = &ss->m;
	if (m->nfwd && (ss->nhop = relay_allowed(s, m->fwd[0], ss->hop, err, errlen)) < 0)
		return ss->nhop;
	for (uint32_t i = 0; s->puller && i < m->nfiles; i++)
		if (!xfer_name_asked(m->files[i].path, s->asked, s->nasked)) {
			snprintf(err, errlen, "the server offered '%.200s', which was not asked for", m->files[i].path);
			return -EPERM;
		}
	char **sorted = malloc((m->nfiles ? m->nfiles : 1) * sizeof(char *));
	if (!sorted) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->nfiles; i++)
		sorted[i] = m->files[i].path;
	qsort(sorted, m->nfiles, sizeof(char *), path_cmp);
	int rc = 0;
	for (uint32_t i = 1; i < m->nfiles && !rc; i++)
		if (!strcmp(sorted[i], sorted[i - 1])) {
			snprintf(err, errlen, "'%.200s' appears twice in the manifest", sorted[i]);
			rc = -EINVAL;
		}
	free(sorted);
	return rc;
}

/* Look at every file of the manifest (creating nothing). */
static int session_open(struct server *s, struct session *ss, char *err, size_t errlen)
{
	const char *why = NULL;
	ss->files = calloc(ss->m.nfiles ? ss->m.nfiles : 1, sizeof(*ss->files));
	if (!ss->files) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ss->m.nfiles; i++, ss->nopen++) {
		int rc = xfer_store_open(s->dirfd, &ss->m, i, &ss->files[i], &why);
		if (rc) {
			snprintf(err, errlen, "'%s': %s: %s", ss->m.files[i].path, why, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/*
 * Count the space the session's parts still need as reserved, if it fits in the free space
 * less what other live sessions reserved (an account, not an allocation: fallocate would
 * zero every page on tmpfs). 0, or -ENOSPC with the figures in <err>.
 */
static int session_reserve(struct server *s, struct session *ss, char *err, size_t errlen)
{
	uint64_t need = 0;
	for (uint32_t i = 0; i < ss->m.nfiles; i++) /* saturating: a peer picks the sizes */
		need = ss->files[i].reserve > UINT64_MAX - need ? UINT64_MAX : need + ss->files[i].reserve;
	struct statvfs v;
	if (fstatvfs(s->dirfd, &v) < 0)
		return 0; /* no figures: the writes will tell */
	uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	if (need > avail || s->reserved > avail - need) {
		snprintf(err, errlen,
			 "not enough space: the transfer needs %.1f MiB more, %.1f MiB are free and %.1f MiB "
			 "of that are reserved by transfers in progress",
			 (double)need / 1048576, (double)avail / 1048576, (double)s->reserved / 1048576);
		rc = -ENOSPC;
	} else {
		s->reserved += need;
		ss->reserved = need;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* bcast: start the engine to the next hop, sending from this receiver's parts. */
static int session_relay(struct server *s, struct session *ss, int tls, char *err, size_t errlen)
{
	const char *why = NULL;
	for (uint32_t i = 0; i < ss->m.nfiles; i++) {
		int rc = xfer_store_acquire(s->dirfd, &ss->files[i], &why);
		if (rc) {
			snprintf(err, errlen, "'%s': %s: %s", ss->m.files[i].path, why, strerror(-rc));
			return rc;
		}
		ss->files[i].pinned = 1; /* the relay reads the map until the session ends */
	}
	ss->relay_m = ss->m;
	ss->relay_m.nfwd = ss->m.nfwd - 1;
	memmove(ss->relay_m.fwd, ss->m.fwd + 1, ss->relay_m.nfwd * sizeof(char *));
	struct xfer_source *src = calloc(ss->m.nfiles ? ss->m.nfiles : 1, sizeof(*src));
	if (!src)
		return -ENOMEM;
	for (uint32_t i = 0; i < ss->m.nfiles; i++)
		src[i] = (struct xfer_source){.fd = ss->files[i].part_fd, .buf = ss->files[i].map,
					      .size = ss->files[i].size};
	struct xfer_send_opts o = {
		.remote = ss->m.fwd[0],
		.bcast = (const char *const *)ss->relay_m.fwd,
		.nbcast = ss->relay_m.nfwd,
		.token_file = s->o->token_file,
		/* a chain that came in over TLS goes on over TLS, this node's certificate its own */
		.tls = tls,
		.tls_ca = s->o->tls_ca,
		.tls_cert = s->o->tls_cert,
		.tls_key = s->o->tls_key,
	};
	struct xfer_report rep;
	int rc = xfer_engine_start(&o, NULL, ss->hop, ss->nhop, &ss->relay_m, src, &ss->relay, &rep);
	free(src);
	if (rc) {
		snprintf(err, errlen, "next bcast hop %s: %s", ss->m.fwd[0], rep.error);
		return rc;
	}
	for (uint32_t f = 0; f < ss->m.nfiles; f++)
		for (uint32_t k = 0; k < ss->files[f].nchunks; k++)
			if (ss->files[f].done[k])
				xfer_engine_feed(ss->relay, f, k, ss->files[f].hashes[k], 1);
	return 0;
}

static int reply_need(struct conn *c)
{
	struct session *ss = c->sess;
	size_t len = xfer_need_len(&ss->m);
	uint8_t *need = calloc(len ? len : 1, 1), *p = need;
	if (!need)
		return -ENOMEM;
	pthread_mutex_lock(&ss->mu);
	for (uint32_t f = 0; f < ss->m.nfiles; f++) {
		for (uint32_t k = 0; k < ss->files[f].nchunks; k++)
			if (!ss->files[f].done[k])
				p[k / 8] |= (uint8_t)(1u << (k % 8));
		p += (ss->files[f].nchunks + 7) / 8;
	}
	pthread_mutex_unlock(&ss->mu);
	int rc = xfer_frame_send(&c->io, XFER_NEED, need, (uint32_t)len);
	free(need);
	return rc;
}

/* Remember why transfer <id> ended (under s->mu). */
static void tomb_add_locked(struct server *s, const uint8_t id[XFER_SESSION_LEN], const char *why)
{
	unsigned t = s->ntombs++ % 8;
	memcpy(s->tombs[t].id, id, XFER_SESSION_LEN);
	snprintf(s->tombs[t].why, sizeof(s->tombs[t].why), "%s", why);
}

/* Why transfer <id> ended, if it did lately (under s->mu): copied to <why>, 1; else 0. */
static int tomb_find_locked(struct server *s, const uint8_t id[XFER_SESSION_LEN], char *why, size_t len)
{
	for (unsigned i = 0; i < s->ntombs && i < 8; i++)
		if (!memcmp(s->tombs[i].id, id, XFER_SESSION_LEN)) {
			snprintf(why, len, "%s", s->tombs[i].why);
			return 1;
		}
	return 0;
}

/* The session a HELLO named, with a reference for the caller, or NULL. */
static struct session *session_get(struct server *s, const uint8_t id[XFER_SESSION_LEN])
{
	pthread_mutex_lock(&s->mu);
	struct session *ss = s->sessions;
	while (ss && memcmp(ss->id, id, XFER_SESSION_LEN))
		ss = ss->next;
	if (ss)
		ss->refs++;
	pthread_mutex_unlock(&s->mu);
	return ss;
}

static int on_manifest(struct conn *c, const struct xfer_hello *hello, uint8_t *meta, uint32_t len)
{
	struct server *s = c->srv;
	if (c->sess) {
		refuse(s, &c->io, "a connection sends one manifest");
		return -EPROTO;
	}
	struct session *ss = session_get(s, hello->session);
	if (ss) {
		c->sess = ss;
		return reply_need(c);
	}
	ss = calloc(1, sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	pthread_mutex_init(&ss->mu, NULL);
	pthread_cond_init(&ss->cv, NULL);
	memcpy(ss->id, hello->session, XFER_SESSION_LEN);
	ss->refs = 1;
	const char *why;
	char err[512];
	int drc = xfer_manifest_decode(meta, len, s->max_files, &ss->m, &why);
	if (drc == -E2BIG) {
		snprintf(err, sizeof(err), "too many files in one transfer (at most %u: serve --max-files)", s->max_files);
		goto refuse;
	} else if (drc) {
		snprintf(err, sizeof(err), "bad manifest: %s", why);
		goto refuse;
	}
	if (manifest_admit(s, ss, err, sizeof(err)) || session_open(s, ss, err, sizeof(err)) ||
	    session_reserve(s, ss, err, sizeof(err)) ||
	    (ss->m.nfwd && session_relay(s, ss, c->io.ssl != NULL, err, sizeof(err))))
		goto refuse;
	pthread_mutex_lock(&s->mu);
	ss->next = s->sessions;
	s->sessions = ss;
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add(&s->m_sessions, 1);
	for (uint32_t i = 0; i < ss->m.nfiles; i++)
		s->total_bytes += ss->m.files[i].size;
	c->sess = ss;
	return reply_need(c);
refuse:
	atomic_fetch_add(&s->m_errors, 1);
	refuse(s, &c->io, err);
	session_free(s, ss, 1);
	return -EINVAL;
}

static int on_chunk(struct conn *c, const struct xfer_hello *hello, const uint8_t *meta,
		    const struct xfer_hdr *h)
{
	struct server *s = c->srv;
	if (!c->sess)
		c->sess = session_get(s, hello->session);
	struct session *ss = c->sess;
	struct xfer_chunk_meta cm;
	if (!ss) {
		char why[200] = "no such transfer (the receiver restarted?)";
		pthread_mutex_lock(&s->mu);
		tomb_find_locked(s, hello->session, why, sizeof(why));
		pthread_mutex_unlock(&s->mu);
		refuse(s, &c->io, why);
		return -EPROTO;
	}
	if (xfer_chunk_decode(meta, h->meta_len, &cm) || cm.file >= ss->m.nfiles ||
	    cm.chunk >= ss->files[cm.file].nchunks) {
		refuse(s, &c->io, "chunk outside the manifest");
		return -EPROTO;
	}
	struct xfer_store_file *f = &ss->files[cm.file];
	uint32_t want = xfer_store_chunk_len(f, cm.chunk);
	if (h->data_len != want) {
		refuse(s, &c->io, "chunk has the wrong length");
		return -EPROTO;
	}
	struct xfer_ack a = {.file = cm.file, .chunk = cm.chunk, .status = XFER_ACK_OK};
	const char *why = "";
	int rc = 0, mine = 0, crowded = 0;
	struct writer me;
	/* a chunk already verified is never written again, by this transfer (done[]) or any
	 * other (the state on disk, asked once the lock is held: see store.h); one being written
	 * gets a second writer only as an end-game copy would, and is re-hashed before the rename */
	pthread_mutex_lock(&ss->mu);
	crowded = !f->done[cm.chunk] && f->writers[cm.chunk] == UINT8_MAX;
	if (!f->done[cm.chunk] && !crowded && !(rc = xfer_store_acquire(s->dirfd, f, &why))) {
		mine = 1;
		if (++f->writers[cm.chunk] > 1)
			f->multi[cm.chunk] = 1;
		f->busy++;
		me = (struct writer){.next = ss->writers, .fd = c->io.fd, .file = cm.file, .chunk = cm.chunk};
		ss->writers = &me;
	}
	pthread_mutex_unlock(&ss->mu);
	if (crowded) {
		refuse(s, &c->io, "too many copies of one chunk at once");
		return -EPROTO;
	}
	if (!mine) {
		/* a copy from the end game or a resend: read it off the wire, keep what we have */
		int drc = xfer_discard(&c->io, want);
		if (drc)
			return drc;
		atomic_fetch_add(&s->m_bytes, want);
		if (rc) {
			a.status = XFER_ACK_IO;
		} else {
			a.status = XFER_ACK_DUP;
			atomic_fetch_add(&s->m_dup, 1);
		}
	} else {
		uint8_t *dst = xfer_store_chunk(f, cm.chunk);
		uint64_t have = 0;
		int first = 0, lost = 0, verified = xfer_store_verified(f, cm.chunk, &have);
		if (verified) {
			/* verified by another transfer of the file: keep its bytes, count its hash */
			rc = xfer_discard(&c->io, want);
			if (rc)
				lost = 1;
			else if (verified < 0) {
				rc = verified;
				a.status = XFER_ACK_IO;
				why = "cannot read its state";
			} else {
				atomic_fetch_add(&s->m_bytes, want);
				cm.hash = have;
			}
		} else if ((rc = net_conn_read_all(&c->io, dst, want)) == -EFAULT) {
			a.status = XFER_ACK_IO; /* the page could not be had: disk full */
			rc = -ENOSPC;
			why = "no space left";
		} else if (rc) {
			lost = 1; /* the connection failed mid-chunk */
		} else {
			atomic_fetch_add(&s->m_bytes, want);
			if (s->corrupt_every && atomic_fetch_add(&s->corrupt_seq, 1) % s->corrupt_every == 0)
				dst[want / 2] ^= 0x5a;
			if (XXH3_64bits(dst, want) != cm.hash) {
				a.status = XFER_ACK_BAD;
				atomic_fetch_add(&s->m_bad, 1);
			} else if ((rc = xfer_store_record(f, cm.chunk, cm.hash))) {
				a.status = XFER_ACK_IO;
				why = "cannot record it";
			}
		}
		pthread_mutex_lock(&ss->mu);
		for (struct writer **w = &ss->writers; *w; w = &(*w)->next)
			if (*w == &me) {
				*w = me.next;
				break;
			}
		f->writers[cm.chunk]--;
		f->busy--;
		if (!lost && a.status == XFER_ACK_OK && verified > 0) {
			first = !f->done[cm.chunk] && xfer_store_mark(f, cm.chunk, cm.hash);
			a.status = XFER_ACK_DUP;
		} else if (!lost && a.status == XFER_ACK_OK) {
			first = xfer_store_mark(f, cm.chunk, cm.hash);
			if (!first)
				a.status = XFER_ACK_DUP;
		}
		if (f->ndone == f->nchunks && !f->busy)
			xfer_store_release(f); /* every chunk there: no descriptor until FINISH */
		pthread_cond_broadcast(&ss->cv);
		pthread_mutex_unlock(&ss->mu);
		if (lost)
			return rc;
		if (first) {
			atomic_fetch_add(&s->m_chunks, 1);
			atomic_fetch_add(&s->link_bytes[c->link % XFER_LINKS_MAX], want);
			pthread_mutex_lock(&s->mu);
			unreserve_locked(s, ss, want);
			pthread_mutex_unlock(&s->mu);
			if (ss->relay)
				xfer_engine_feed(ss->relay, cm.file, cm.chunk, cm.hash, 1);
		} else if (a.status == XFER_ACK_DUP) {
			atomic_fetch_add(&s->m_dup, 1);
		}
	}
	if (a.status == XFER_ACK_IO)
		atomic_fetch_add(&s->m_errors, 1);
	uint8_t out[XFER_ACK_LEN];
	xfer_ack_encode(out, &a);
	int wrc = xfer_frame_send(&c->io, XFER_ACK, out, sizeof(out));
	if (a.status == XFER_ACK_IO) {
		char msg[200];
		snprintf(msg, sizeof(msg), "cannot write '%.100s': %s: %s", f->path, why, strerror(-rc));
		pthread_mutex_lock(&s->mu);
		tomb_add_locked(s, ss->id, msg);
		pthread_mutex_unlock(&s->mu);
		refuse(s, &c->io, msg);
		return rc;
	}
	return wrc;
}

static int on_finish(struct conn *c, const struct xfer_hello *hello, const uint8_t *meta, uint32_t len)
{
	struct server *s = c->srv;
	if (!c->sess)
		c->sess = session_get(s, hello->session);
	struct session *ss = c->sess;
	char err[512] = "";
	if (!ss || len != ss->m.nfiles * 16u) {
		refuse(s, &c->io, "FINISH does not match the manifest");
		return -EPROTO;
	}
	pthread_mutex_lock(&ss->mu);
	/*
	 * The sender has every acknowledgement, so a connection still writing into a verified
	 * chunk is one it gave up (a dead link) or not the sender's: end it rather than wait for
	 * its timeout, then wait for its thread to let go of the chunk.
	 */
	for (struct writer *w = ss->writers; w; w = w->next)
		if (ss->files[w->file].done[w->chunk])
			shutdown(w->fd, SHUT_RDWR);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += SERVE_FINISH_WAIT_S;
	for (uint32_t i = 0; i < ss->m.nfiles; i++)
		while (ss->files[i].busy)
			if (pthread_cond_timedwait(&ss->cv, &ss->mu, &until)) {
				snprintf(err, sizeof(err), "'%s': a chunk is still being written by another connection",
					 ss->files[i].path);
				break;
			}
	for (uint32_t i = 0; i < ss->m.nfiles && !err[0]; i++) {
		struct xfer_store_file *f = &ss->files[i];
		const char *why;
		uint32_t bad = UINT32_MAX;
		if (f->finished)
			continue;
		int rc = xfer_store_finish(s->dirfd, f, meta + 16 * (size_t)i, &bad, &why);
		if (rc && bad != UINT32_MAX)
			snprintf(err, sizeof(err), "'%s': chunk %u was overwritten by a second writer after it was "
						   "verified; send again to resume", f->path, bad);
		else if (rc)
			snprintf(err, sizeof(err), "'%s': %s", f->path, why);
		else
			atomic_fetch_add(&s->m_files, 1);
	}
	if (!err[0] && ss->relay && !ss->finished) {
		struct xfer_report rep;
		if (xfer_engine_finish(ss->relay, &rep))
			snprintf(err, sizeof(err), "next bcast hop %s: %s", ss->m.fwd[0], rep.error);
	}
	if (!err[0]) {
		ss->finished = 1;
		s->done_ok = 1;
	}
	pthread_mutex_unlock(&ss->mu);
	if (err[0]) {
		atomic_fetch_add(&s->m_errors, 1);
		refuse(s, &c->io, err);
		return -EIO;
	}
	return xfer_frame_send(&c->io, XFER_DONE, NULL, 0);
}

static int pull_serve(struct conn *c, const struct xfer_hello *hello);

/* Frames from the peer until it goes or something fails. */
static void conn_loop(struct conn *c, const struct xfer_hello *hello)
{
	struct server *s = c->srv;
	int rc = 0;
	uint8_t small[64];
	while (rc == 0) {
		struct xfer_hdr h;
		uint8_t *meta = NULL;
		if ((rc = xfer_frame_recv_into(&c->io, &h, small, sizeof(small), &meta)))
			break;
		switch (h.type) {
		case XFER_MANIFEST:
			rc = on_manifest(c, hello, meta, h.meta_len);
			break;
		case XFER_CHUNK:
			rc = h.meta_len == XFER_CHUNK_LEN ? on_chunk(c, hello, meta, &h) : -EPROTO;
			break;
		case XFER_FINISH:
			rc = on_finish(c, hello, meta, h.meta_len);
			break;
		case XFER_ERR:
			if (s->puller) {
				meta[h.meta_len] = 0;
				pthread_mutex_lock(&s->mu);
				if (!s->peer_err[0])
					snprintf(s->peer_err, sizeof(s->peer_err), "%s", (char *)meta);
				pthread_mutex_unlock(&s->mu);
			}
			rc = -EPROTO;
			break;
		default:
			refuse(s, &c->io, "unexpected message");
			rc = -EPROTO;
		}
		if (meta != small)
			free(meta);
	}
}

static void set_keepalive(int fd)
{
	/* a peer behind a dead link is noticed in about 30 s, not at the idle timeout */
	int one = 1, idle = 15, intvl = 5, cnt = 3;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct server *s = c->srv;
	struct xfer_hello hello;
	int handed = 0;
	const char *why = NULL;
	set_keepalive(c->io.fd);
	/* each read waits at most the handshake's time, and the accept loop cuts the connection
	 * at its deadline however it trickles (live_expire) */
	xfer_set_timeout(c->io.fd, s->handshake_ms);
	int rc = xfer_conn_start_server(&c->io, s->tls, s->tls_required, &why);
	if (rc == 0)
		rc = xfer_handshake_server(&c->io, &s->token, &hello);
	live_settle(s, c->live_id);
	if (rc == -EACCES)
		atomic_fetch_add(&s->m_auth_fail, 1);
	xfer_set_timeout(c->io.fd, SERVE_IDLE_MS);
	if (rc == 0 && hello.role == XFER_ROLE_PULL)
		handed = pull_serve(c, &hello);
	else if (rc == 0)
		conn_loop(c, &hello);
	if (c->sess)
		session_put(s, c->sess);
	struct net_conn io = c->io;
	uint64_t id = c->live_id;
	free(c);
	if (!handed) { /* a connection handed to a pull is closed, and given back, by the pull */
		live_unlist(s, id);
		net_conn_close(&io);
		live_release(s);
	}
	OPENSSL_thread_stop(); /* this thread's random and TLS state, before the process may end */
	pthread_mutex_lock(&s->mu); /* last: xfer_serve may return as soon as no thread is left */
	s->threads--;
	pthread_cond_broadcast(&s->conns_cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* The engine's way to a client connection: the next one queued, waiting a little for more. */
static int pull_take(void *arg, unsigned *link, struct net_conn *io)
{
	struct pull *p = arg;
	struct server *s = p->srv;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2;
	int fd = -1;
	pthread_mutex_lock(&s->mu);
	while (p->head == p->tail && !p->closed && p->head < p->expected)
		if (pthread_cond_timedwait(&p->cv, &s->mu, &ts))
			break;
	if (p->head != p->tail) {
		*io = p->ios[p->head];
		*link = p->links[p->head];
		p->head++;
		fd = io->fd;
	}
	pthread_mutex_unlock(&s->mu);
	return fd;
}

/* The engine is done with a connection pull_take() gave it: close it, and only then give its
 * count back. */
static void pull_put(void *arg, struct net_conn *io)
{
	struct pull *p = arg;
	struct server *s = p->srv;
	int found = 0;
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < p->head && !found; i++)
		if (p->ios[i].fd == io->fd) {
			p->ios[i].fd = -1;
			live_unlist_locked(s, p->live_ids[i]);
			found = 1;
		}
	pthread_mutex_unlock(&s->mu);
	net_conn_close(io);
	if (found)
		live_release(s);
}

/*
 * A PULL connection: every one of the client's connections says GET with the same names. The
 * first becomes the sending side (an engine over adopted connections, files opened beneath
 * DIR); the others queue for it. Returns 1 when the descriptor was handed over.
 */
static int pull_serve(struct conn *c, const struct xfer_hello *hello)
{
	struct server *s = c->srv;
	struct xfer_hdr h;
	uint8_t *meta = NULL;
	char **names = NULL;
	unsigned nnames = 0;
	const char *why;
	/* GET: u32 connections the client opens, then the names */
	if (xfer_frame_recv_alloc(&c->io, &h, &meta) || h.type != XFER_GET || h.meta_len < 4 ||
	    xfer_names_decode(meta + 4, h.meta_len - 4, &names, &nnames, &why)) {
		send_err(&c->io, "expected GET with the names to send");
		free(meta);
		return 0;
	}
	unsigned expected = wire_get32(meta);
	free(meta);
	if (expected == 0 || expected > PULL_MAX_STREAMS)
		expected = PULL_MAX_STREAMS;
	pthread_mutex_lock(&s->mu);
	char ended[200];
	if (tomb_find_locked(s, hello->session, ended, sizeof(ended))) {
		/* a connection that arrives after its GET was answered must not start it again */
		pthread_mutex_unlock(&s->mu);
		free(names);
		send_err(&c->io, ended);
		return 0;
	}
	struct pull *p = s->pulls;
	while (p && memcmp(p->id, hello->session, XFER_SESSION_LEN))
		p = p->next;
	if (p) {
		int queued = !p->closed && p->tail < PULL_MAX_STREAMS;
		if (queued) {
			p->links[p->tail] = c->link;
			p->live_ids[p->tail] = c->live_id;
			p->ios[p->tail++] = c->io;
			pthread_cond_broadcast(&p->cv);
		}
		pthread_mutex_unlock(&s->mu);
		free(names);
		return queued;
	}
	p = calloc(1, sizeof(*p));
	if (p) {
		memcpy(p->id, hello->session, XFER_SESSION_LEN);
		p->srv = s;
		p->expected = expected;
		pthread_cond_init(&p->cv, NULL);
		p->links[0] = c->link;
		p->live_ids[0] = c->live_id;
		p->ios[p->tail++] = c->io;
		p->next = s->pulls;
		s->pulls = p;
	}
	pthread_mutex_unlock(&s->mu);
	if (!p) {
		free(names);
		return 0;
	}

	/* what to send: each name, a file or a tree, found beneath DIR without leaving it */
	struct xfer_item *items = NULL;
	unsigned nitems = 0;
	char err[300] = "";
	xfer_items_beneath(s->dirfd, (const char *const *)names, nnames, &items, &nitems, err, sizeof(err));
	free(names);
	int handed = 0;
	if (err[0]) {
		send_err(&c->io, err);
	} else {
		struct xfer_adopt ad = {.take = pull_take, .put = pull_put, .arg = p, .nlinks = s->nlisten,
					.max_streams = expected};
		for (unsigned i = 0; i < s->nlisten; i++)
			ad.names[i] = s->listen_names[i];
		struct xfer_send_opts o = {0};
		struct xfer_report rep;
		if (xfer_send_items(&o, &ad, s->dirfd, items, nitems, &rep)) {
			char clean[sizeof(rep.error)]; /* it may quote the client's ERR: no control characters */
			size_t k = 0;
			for (; rep.error[k]; k++)
				clean[k] = (unsigned char)rep.error[k] < 0x20 || rep.error[k] == 0x7f ? '?' : rep.error[k];
			clean[k] = 0;
			log_warn("xfer get: %s", clean);
			/* the first connection is still ours when the engine never started */
			pthread_mutex_lock(&s->mu);
			handed = p->head > 0;
			pthread_mutex_unlock(&s->mu);
			if (!handed && rep.error[0])
				send_err(&c->io, rep.error);
		} else {
			handed = 1;
		}
	}
	xfer_items_free(items, nitems);
	pthread_mutex_lock(&s->mu);
	p->closed = 1;
	tomb_add_locked(s, p->id, err[0] ? err : "this transfer has ended");
	if (!handed && p->head == 0)
		p->head = 1; /* ours: conn_main closes it */
	unsigned nleft = p->tail - p->head; /* queued, never taken: closed here */
	for (unsigned i = p->head; i < p->tail; i++)
		live_unlist_locked(s, p->live_ids[i]);
	for (struct pull **pp = &s->pulls; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = p->tail - nleft; i < p->tail; i++) {
		net_conn_close(&p->ios[i]);
		live_release(s);
	}
	pthread_cond_destroy(&p->cv);
	free(p);
	return handed;
}

static void metrics_reply(struct server *s, int fd)
{
	struct net_conn io;
	char req[1024];
	net_conn_init(&io, fd);
	xfer_set_timeout(fd, 2000);
	ssize_t n = net_conn_read(&io, req, sizeof(req) - 1);
	if (n <= 0)
		return;
	req[n] = 0;
	char body[4096];
	int len;
	if (strncmp(req, "GET /metrics ", 13)) {
		len = snprintf(body, sizeof(body), "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
		net_conn_write_all(&io, body, (size_t)len);
		return;
	}
	pthread_mutex_lock(&s->mu);
	unsigned conns = s->conns, sessions = 0;
	for (struct session *ss = s->sessions; ss; ss = ss->next)
		sessions++;
	pthread_mutex_unlock(&s->mu);
	int blen = snprintf(body, sizeof(body),
			    "# TYPE accelnet_xfer_received_bytes_total counter\n"
			    "accelnet_xfer_received_bytes_total %llu\n"
			    "# TYPE accelnet_xfer_chunks_total counter\n"
			    "accelnet_xfer_chunks_total{result=\"ok\"} %llu\n"
			    "accelnet_xfer_chunks_total{result=\"duplicate\"} %llu\n"
			    "accelnet_xfer_chunks_total{result=\"corrupt\"} %llu\n"
			    "# TYPE accelnet_xfer_files_completed_total counter\n"
			    "accelnet_xfer_files_completed_total %llu\n"
			    "# TYPE accelnet_xfer_sessions_total counter\n"
			    "accelnet_xfer_sessions_total %llu\n"
			    "# TYPE accelnet_xfer_sessions gauge\n"
			    "accelnet_xfer_sessions %u\n"
			    "# TYPE accelnet_xfer_connections gauge\n"
			    "accelnet_xfer_connections %u\n"
			    "# TYPE accelnet_xfer_connections_total counter\n"
			    "accelnet_xfer_connections_total %llu\n"
			    "# TYPE accelnet_xfer_auth_failures_total counter\n"
			    "accelnet_xfer_auth_failures_total %llu\n"
			    "# TYPE accelnet_xfer_errors_total counter\n"
			    "accelnet_xfer_errors_total %llu\n",
			    (unsigned long long)s->m_bytes, (unsigned long long)s->m_chunks,
			    (unsigned long long)s->m_dup, (unsigned long long)s->m_bad,
			    (unsigned long long)s->m_files, (unsigned long long)s->m_sessions, sessions, conns,
			    (unsigned long long)s->m_conns_total, (unsigned long long)s->m_auth_fail,
			    (unsigned long long)s->m_errors);
	blen += snprintf(body + blen, sizeof(body) - (size_t)blen,
			 "# TYPE accelnet_xfer_link_bytes_total counter\n");
	for (unsigned i = 0; i < s->nlisten && blen < (int)sizeof(body); i++)
		blen += snprintf(body + blen, sizeof(body) - (size_t)blen,
				 "accelnet_xfer_link_bytes_total{listen=\"%s\"} %llu\n", s->listen_names[i],
				 (unsigned long long)atomic_load(&s->link_bytes[i]));
	if (blen >= (int)sizeof(body))
		blen = (int)sizeof(body) - 1;
	char head[256];
	len = snprintf(head, sizeof(head),
		       "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n"
		       "Connection: close\r\n\r\n",
		       blen);
	if (net_conn_write_all(&io, head, (size_t)len) == 0)
		net_conn_write_all(&io, body, (size_t)blen);
}

static int listen_on(const char *text, int *fd, char *err, size_t errlen)
{
	struct net_addr a;
	const char *why;
	if (net_addr_parse(text, &a, &why)) {
		snprintf(err, errlen, "bad listen address '%s': %s", text, why);
		return -EINVAL;
	}
	*fd = sock_listen(&a, 0);
	if (*fd < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", text, strerror(-*fd));
		return *fd;
	}
	return 0;
}

/* --metrics on its own thread: an idle scraper holds up only other scrapes, for at most 2 s. */
struct metrics_thread {
	struct server *s;
	int fd;
	volatile int *stop;
};

static void *metrics_main(void *arg)
{
	struct metrics_thread *mt = arg;
	struct pollfd p = {.fd = mt->fd, .events = POLLIN};
	while (!*mt->stop) {
		if (poll(&p, 1, 200) <= 0)
			continue;
		struct sockaddr_storage peer;
		socklen_t plen;
		int fd = sock_accept(mt->fd, &peer, &plen);
		if (fd < 0) {
			if (fd != -EAGAIN)
				poll(NULL, 0, 200); /* out of descriptors: try again later, not at once */
			continue;
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		metrics_reply(mt->s, fd);
		close(fd);
	}
	OPENSSL_thread_stop();
	return NULL;
}

/* Limits from the options, defaults for those left 0 (a puller has no options of its own). */
static void limits_set(struct server *s, const struct xfer_serve_opts *o)
{
	s->max_conns = o->max_conns ? o->max_conns : XFER_SERVE_MAX_CONNS;
	s->max_per_addr = o->max_conns_per_addr ? o->max_conns_per_addr : XFER_SERVE_MAX_CONNS_PER_ADDR;
	s->max_files = o->max_files ? o->max_files : XFER_SERVE_MAX_FILES;
	s->handshake_ms = o->handshake_ms ? (int)o->handshake_ms : XFER_SERVE_HANDSHAKE_MS;
}

static int relay_parse(struct server *s, const char *list, char *err, size_t errlen)
{
	char buf[XFER_ADDR_LIST_MAX + 1];
	char *save = NULL;
	if (list && strlen(list) > XFER_ADDR_LIST_MAX) {
		snprintf(err, errlen, "--relay-to: too long (at most %d characters)", XFER_ADDR_LIST_MAX);
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (s->nrelay == sizeof(s->relay) / sizeof(s->relay[0])) {
			snprintf(err, errlen, "--relay-to: at most %zu networks", sizeof(s->relay) / sizeof(s->relay[0]));
			return -EINVAL;
		}
		const char *why = NULL;
		if (net_cidr_parse(t, &s->relay[s->nrelay], &why)) {
			snprintf(err, errlen, "--relay-to: '%s' is not an address or ADDRESS/BITS: %s",
				 t, why);
			return -EINVAL;
		}
		s->nrelay++;
	}
	return 0;
}

/* Start a connection's thread, or refuse it when a cap is reached. */
static void conn_start(struct server *s, int fd, const struct sockaddr_storage *peer, unsigned link)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	uint64_t id = 0;
	const char *full = live_admit(s, fd, peer, &id);
	if (full) {
		refuse_conn(fd, full);
		return;
	}
	atomic_fetch_add(&s->m_conns_total, 1);
	struct conn *c = calloc(1, sizeof(*c));
	pthread_t th;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (c) {
		c->srv = s;
		c->io = (struct net_conn){.fd = fd};
		c->link = link;
		c->live_id = id;
	}
	pthread_mutex_lock(&s->mu);
	s->threads++;
	pthread_mutex_unlock(&s->mu);
	if (!c || pthread_create(&th, &attr, conn_main, c)) {
		free(c);
		live_unlist(s, id);
		close(fd);
		pthread_mutex_lock(&s->mu);
		s->threads--;
		pthread_mutex_unlock(&s->mu);
		live_release(s);
	}
	pthread_attr_destroy(&attr);
}

int xfer_serve(const struct xfer_serve_opts *o)
{
	struct server s = {.o = o, .dirfd = -1, .wake_fd = -1};
	int lfd[SERVE_MAX_LISTEN], ports[SERVE_MAX_LISTEN];
	unsigned nl = 0;
	int mfd = -1, rc = 0, metrics_started = 0;
	char err[256] = "";
	pthread_t mth;
	struct metrics_thread mt = {.s = &s, .stop = o->stop};
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.conns_cv, NULL);
	limits_set(&s, o);
	const char *env = getenv("ACCELNET_XFER_CORRUPT_EVERY");
	s.corrupt_every = env ? (unsigned)strtoul(env, NULL, 10) : 0;
	if (!o->token_file && !o->tls_ca && !o->insecure) {
		snprintf(err, sizeof(err),
			 "refusing to serve %s to anyone who can connect: give --token FILE (or --tls-ca FILE "
			 "for mutual TLS), or --insecure to accept that",
			 o->dir);
		rc = -EPERM;
		goto out;
	}
	if ((rc = relay_parse(&s, o->relay_to, err, sizeof(err))))
		goto out;
	if (o->token_file) {
		const char *why;
		if ((rc = xfer_token_load(o->token_file, &s.token, &why))) {
			snprintf(err, sizeof(err), "%s: %s", o->token_file, why);
			goto out;
		}
	}
	if (o->tls_cert || o->tls_key || o->tls_ca) {
		struct net_tls_opts t = {.ca = o->tls_ca, .cert = o->tls_cert, .key = o->tls_key};
		if ((rc = net_tls_ctx_server(&t, &s.tls, err, sizeof(err))))
			goto out;
		s.tls_required = o->tls_ca != NULL;
	}
	s.dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s.dirfd < 0 || s.wake_fd < 0) {
		rc = -errno;
		snprintf(err, sizeof(err), "%s: %s", o->dir, strerror(errno));
		goto out;
	}
	char buf[XFER_ADDR_LIST_MAX + 1];
	if (o->listen && strlen(o->listen) > XFER_ADDR_LIST_MAX) {
		snprintf(err, sizeof(err), "--listen: too long (at most %d characters)", XFER_ADDR_LIST_MAX);
		rc = -EINVAL;
		goto out;
	}
	snprintf(buf, sizeof(buf), "%s", o->listen ? o->listen : "");
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (nl == SERVE_MAX_LISTEN) {
			snprintf(err, sizeof(err), "at most %d listen addresses", SERVE_MAX_LISTEN);
			rc = -EINVAL;
			goto out;
		}
		if ((rc = listen_on(t, &lfd[nl], err, sizeof(err))))
			goto out;
		ports[nl] = sock_local_port(lfd[nl]);
		snprintf(s.listen_names[nl], sizeof(s.listen_names[nl]), "%.63s", t);
		nl++;
		s.nlisten = nl;
	}
	if (!nl) {
		snprintf(err, sizeof(err), "no listen address");
		rc = -EINVAL;
		goto out;
	}
	if (o->metrics) {
		if ((rc = listen_on(o->metrics, &mfd, err, sizeof(err))))
			goto out;
		mt.fd = mfd;
		if (pthread_create(&mth, NULL, metrics_main, &mt)) {
			rc = -EAGAIN;
			snprintf(err, sizeof(err), "cannot start the metrics thread");
			goto out;
		}
		metrics_started = 1;
	}
	if (!o->token_file && !o->tls_ca)
		log_warn("xfer serve: warning: --insecure: no token and no client certificates; anyone who can reach "
			 "%s can read and overwrite every file under %s",
			 o->listen, o->dir);
	if (o->ready)
		o->ready(ports, nl, o->arg);
	struct pollfd pfd[SERVE_MAX_LISTEN + 1];
	for (unsigned i = 0; i < nl; i++)
		pfd[i] = (struct pollfd){.fd = lfd[i], .events = POLLIN};
	pfd[nl] = (struct pollfd){.fd = s.wake_fd, .events = POLLIN};
	uint64_t next_sweep = 0, resume_at = 0;
	uint64_t keep_s = o->keep_parts_hours ? (uint64_t)o->keep_parts_hours * 3600 : 72 * 3600;
	while (!*o->stop) {
		uint64_t now = clock_now_ms();
		if (now >= next_sweep) { /* at start, then hourly */
			unsigned removed;
			if (xfer_store_sweep(s.dirfd, keep_s, &removed) == 0 && removed)
				log_info("xfer serve: removed %u abandoned partial file(s) older than %llu h", removed,
					 (unsigned long long)(keep_s / 3600));
			next_sweep = now + 3600 * 1000;
		}
		live_expire(&s, now);
		int paused = atomic_load(&s.accept_paused);
		if (paused && now >= resume_at)
			atomic_store(&s.accept_paused, paused = 0);
		/* paused: only the wake-up (a connection ended) or the timer, not the listeners */
		int n = paused ? poll(&pfd[nl], 1, 200) : poll(pfd, nl + 1, 200);
		if (n <= 0)
			continue;
		if (pfd[nl].revents & POLLIN) {
			uint64_t v;
			ssize_t r = read(s.wake_fd, &v, sizeof(v));
			(void)r; /* drained or not, the next poll says */
			atomic_store(&s.accept_paused, 0);
		}
		for (unsigned i = 0; !paused && i < nl; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			struct sockaddr_storage peer;
			socklen_t plen;
			int fd = sock_accept(pfd[i].fd, &peer, &plen);
			if (sock_error_is_local(fd)) {
				/* no descriptor (or memory) for it: wait for one to free rather than spin */
				atomic_store(&s.accept_paused, 1);
				resume_at = clock_now_ms() + SERVE_ACCEPT_PAUSE_MS;
				log_warn_every(60000, "xfer serve: cannot accept: %s; waiting for a "
						      "connection to end", strerror(-fd));
				break;
			}
			if (fd >= 0)
				conn_start(&s, fd, &peer, i);
		}
	}
	/* stop: end every connection, then wait for their threads */
	pthread_mutex_lock(&s.mu);
	for (unsigned i = 0; i < s.nlive; i++)
		shutdown(s.live[i].fd, SHUT_RDWR);
	while (s.conns || s.threads)
		pthread_cond_wait(&s.conns_cv, &s.mu);
	pthread_mutex_unlock(&s.mu);
out:
	if (metrics_started)
		pthread_join(mth, NULL);
	if (err[0])
		fprintf(stderr, "accelnet xfer serve: %s\n", err);
	for (unsigned i = 0; i < nl; i++)
		close(lfd[i]);
	if (mfd >= 0)
		close(mfd);
	if (s.dirfd >= 0)
		close(s.dirfd);
	if (s.wake_fd >= 0)
		close(s.wake_fd);
	free(s.live);
	if (s.tls)
		net_tls_ctx_free(s.tls);
	OPENSSL_cleanse(&s.token, sizeof(s.token));
	return rc;
}

struct get_conn {
	struct conn *c;
	struct xfer_hello hello;
	pthread_t th;
};

static void *get_main(void *arg)
{
	struct get_conn *g = arg;
	struct conn *c = g->c;
	struct server *s = c->srv;
	conn_loop(c, &g->hello);
	if (c->sess)
		session_put(s, c->sess);
	net_conn_close(&c->io);
	free(c);
	OPENSSL_thread_stop();
	return NULL;
}

int xfer_get(const struct xfer_send_opts *o, const char *const *names, unsigned n, const char *dest,
	     struct xfer_report *rep)
{
	struct server s = {.dirfd = -1, .puller = 1, .wake_fd = -1, .asked = names, .nasked = n};
	struct xfer_serve_opts so = {.dir = dest};
	struct xfer_path paths[XFER_LINKS_MAX];
	struct xfer_token token;
	struct get_conn *gc = NULL;
	struct ssl_ctx_st *tls = NULL;
	unsigned ngc = 0, per = o->streams ? o->streams : 4;
	uint8_t *enc = NULL;
	size_t enclen;
	int rc;
	uint64_t t0 = clock_now_ns();
	memset(rep, 0, sizeof(*rep));
	memset(&token, 0, sizeof(token));
	s.o = &so;
	limits_set(&s, &so);
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.conns_cv, NULL);
	int np = xfer_paths_parse(o->remote, o->local, paths, XFER_LINKS_MAX, rep->error, sizeof(rep->error));
	if (np < 0)
		return np;
	const char *why;
	if (o->token_file && (rc = xfer_token_load(o->token_file, &token, &why))) {
		snprintf(rep->error, sizeof(rep->error), "token: %s", why);
		return rc;
	}
	uint8_t *names_enc;
	if ((rc = xfer_names_encode(names, n, &names_enc, &enclen))) {
		snprintf(rep->error, sizeof(rep->error), "names too long");
		goto out;
	}
	enc = malloc(enclen + 4);
	if (!enc) {
		free(names_enc);
		rc = -ENOMEM;
		goto out;
	}
	wire_put32(enc, (uint32_t)np * per);
	memcpy(enc + 4, names_enc, enclen);
	enclen += 4;
	free(names_enc);
	for (unsigned i = 0; i < n; i++)
		if (xfer_path_check(names[i], strlen(names[i]), &why)) {
			snprintf(rep->error, sizeof(rep->error), "'%s': %s", names[i], why);
			rc = -EINVAL;
			goto out;
		}
	s.dirfd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s.dirfd < 0) {
		rc = -errno;
		snprintf(rep->error, sizeof(rep->error), "%s: %s", dest, strerror(errno));
		goto out;
	}
	struct xfer_hello hello = {.version = XFER_VERSION, .role = XFER_ROLE_PULL};
	if (RAND_bytes(hello.session, sizeof(hello.session)) != 1) {
		rc = -EIO;
		goto out;
	}
	gc = calloc((size_t)np * per, sizeof(*gc));
	if (!gc) {
		rc = -ENOMEM;
		goto out;
	}
	if (o->tls) {
		struct net_tls_opts t = {.ca = o->tls_ca, .cert = o->tls_cert, .key = o->tls_key,
					  .insecure = o->tls_insecure};
		if ((rc = net_tls_ctx_client(&t, &tls, rep->error, sizeof(rep->error))))
			goto out;
	}
	/* the first connection that answers goes first: the server makes it the sending side */
	rc = -EHOSTUNREACH;
	for (unsigned k = 0; k < per; k++)
		for (int i = 0; i < np; i++) {
			int stall = o->stall_ms ? (int)o->stall_ms : 5000;
			int fd = xfer_dial(&paths[i].remote, paths[i].has_local ? &paths[i].local : NULL, stall, -1);
			char err[256];
			if (fd < 0) {
				if (rc == -EHOSTUNREACH)
					snprintf(rep->error, sizeof(rep->error), "cannot reach %s: %s", paths[i].rname,
						 strerror(-fd));
				continue;
			}
			struct net_conn io = {.fd = fd};
			int hrc = xfer_conn_start_client(&io, tls, paths[i].rname, err, sizeof(err));
			if (hrc == 0)
				hrc = xfer_handshake_client(&io, &token, XFER_ROLE_PULL, hello.session, err, sizeof(err));
			if (hrc == 0)
				hrc = xfer_frame_send(&io, XFER_GET, enc, (uint32_t)enclen);
			if (hrc) {
				if (hrc == -EACCES)
					snprintf(rep->error, sizeof(rep->error), "server refused: %.200s", err);
				net_conn_close(&io);
				if (hrc == -EACCES)
					goto wait;
				continue;
			}
			xfer_set_timeout(fd, SERVE_IDLE_MS);
			set_keepalive(fd);
			struct conn *c = calloc(1, sizeof(*c));
			if (!c) {
				net_conn_close(&io);
				continue;
			}
			*c = (struct conn){.srv = &s, .io = io, .link = (unsigned)i};
			gc[ngc] = (struct get_conn){.c = c, .hello = hello};
			if (pthread_create(&gc[ngc].th, NULL, get_main, &gc[ngc])) {
				net_conn_close(&io);
				free(c);
				continue;
			}
			ngc++;
			rc = 0;
		}
wait:
	for (unsigned i = 0; i < ngc; i++)
		pthread_join(gc[i].th, NULL);
	if (ngc && !s.done_ok) {
		rc = -EIO;
		snprintf(rep->error, sizeof(rep->error), "%s",
			 s.peer_err[0] ? s.peer_err : "the server went away before the transfer ended");
	} else if (!ngc && !rc) {
		rc = -EHOSTUNREACH;
	}
	if (s.done_ok)
		rc = 0;
out:
	rep->seconds = (double)(clock_now_ns() - t0) / 1e9;
	rep->files = (uint32_t)atomic_load(&s.m_files);
	rep->chunks_bad = (uint32_t)atomic_load(&s.m_bad);
	rep->nlinks = np > 0 ? (unsigned)np : 0;
	for (unsigned i = 0; i < rep->nlinks; i++) {
		struct xfer_link_report *l = &rep->links[i];
		snprintf(l->remote, sizeof(l->remote), "%s", paths[i].rname);
		snprintf(l->local, sizeof(l->local), "%s", paths[i].lname);
		l->bytes = atomic_load(&s.link_bytes[i]);
		l->gbps = rep->seconds > 0 ? (double)l->bytes * 8 / rep->seconds / 1e9 : 0;
		rep->bytes_acked += l->bytes;
	}
	rep->bytes_total = s.total_bytes;
	rep->bytes_skipped = s.total_bytes > rep->bytes_acked ? s.total_bytes - rep->bytes_acked : 0;
	if (rc && !rep->error[0])
		snprintf(rep->error, sizeof(rep->error), "%s", strerror(-rc));
	free(gc);
	free(enc);
	if (tls)
		net_tls_ctx_free(tls);
	if (s.dirfd >= 0)
		close(s.dirfd);
	OPENSSL_cleanse(&token, sizeof(token));
	return rc;
}
