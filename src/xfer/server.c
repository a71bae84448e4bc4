/*
 * server.c - a receiving side's connection accounting, tombs and refusals (see server.h).
 */
#include "xfer/server.h"

#include "core/clock.h"
#include "net/tls.h"
#include "net/sock.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	struct xfer_server_conn
	    *frames; /* its frames' deadline, once watched (xfer_server_watch) */
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
 * handshake_ms). It stays counted until xfer_server_unlist() and xfer_server_release() (see struct
 * live).
 */
const char *xfer_server_admit(struct xfer_server *s, int fd, const struct sockaddr_storage *peer,
			      uint64_t *id)
{
	static const char *const full_all =
	    "too many connections to this server (serve --max-conns)";
	static const char *const full_addr =
	    "too many connections from your address (serve --max-conns-per-addr)";
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
void xfer_server_settle(struct xfer_server *s, uint64_t id)
{
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i].id == id)
			s->live[i].deadline_ms = 0;
	pthread_mutex_unlock(&s->mu);
}

void xfer_server_watch(struct xfer_server *s, uint64_t id, struct xfer_server_conn *c)
{
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i].id == id)
			s->live[i].frames = c;
	pthread_mutex_unlock(&s->mu);
}

void xfer_server_frame_begin(struct xfer_server_conn *c)
{
	atomic_store_explicit(&c->frame_due, clock_now_ms() + c->srv->frame_ms,
			      memory_order_relaxed);
}

void xfer_server_frame_length(struct xfer_server_conn *c, uint64_t bytes)
{
	uint64_t due = atomic_load_explicit(&c->frame_due, memory_order_relaxed);
	if (due) /* (bytes < 2^33: no overflow) */
		atomic_store_explicit(&c->frame_due, due + bytes * 1000 / c->srv->min_rate,
				      memory_order_relaxed);
}

/* Cut off the connections whose handshake or frame ran past its deadline (however they
 * trickle). */
void xfer_server_expire(struct xfer_server *s, uint64_t now)
{
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < s->nlive; i++) {
		struct live *l = &s->live[i];
		if (l->deadline_ms && now >= l->deadline_ms) {
			sock_abort(l->fd);
			l->deadline_ms = 0;
		}
		uint64_t due =
		    l->frames ? atomic_load_explicit(&l->frames->frame_due, memory_order_relaxed)
			      : 0;
		if (due && now >= due) {
			sock_abort(l->fd); /* its thread's read fails, and it ends */
			l->frames = NULL;
			atomic_fetch_add(&s->m_slow_frames, 1);
		}
	}
	pthread_mutex_unlock(&s->mu);
}

/* Before closing connection <id>: it leaves the list (nothing may touch its descriptor now). */
void xfer_server_unlist_locked(struct xfer_server *s, uint64_t id)
{
	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i].id == id) {
			s->live[i] = s->live[--s->nlive];
			break;
		}
}

void xfer_server_unlist(struct xfer_server *s, uint64_t id)
{
	pthread_mutex_lock(&s->mu);
	xfer_server_unlist_locked(s, id);
	pthread_mutex_unlock(&s->mu);
}

/* After closing a connection: its count goes back, and a paused accept loop may go on. */
void xfer_server_release(struct xfer_server *s)
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

void xfer_server_fail(struct xfer_server *s, const char *why)
{
	pthread_mutex_lock(&s->mu);
	if (!s->peer_err[0])
		snprintf(s->peer_err, sizeof(s->peer_err), "%s", why);
	pthread_mutex_unlock(&s->mu);
}

void xfer_server_refuse(struct xfer_server *s, struct net_conn *c, const char *msg)
{
	if (s->puller)
		xfer_server_fail(s, msg);
	xfer_frame_send(c, XFER_ERR, msg, (uint32_t)strlen(msg));
}

/* Remember why transfer <id> ended (under s->mu). */
void xfer_server_tomb_add_locked(struct xfer_server *s, const uint8_t id[XFER_SESSION_LEN],
				 const char *why)
{
	unsigned t = s->ntombs++ % 8;
	memcpy(s->tombs[t].id, id, XFER_SESSION_LEN);
	snprintf(s->tombs[t].why, sizeof(s->tombs[t].why), "%s", why);
}

/* Why transfer <id> ended, if it did lately (under s->mu): copied to <why>, 1; else 0. */
int xfer_server_tomb_find_locked(struct xfer_server *s, const uint8_t id[XFER_SESSION_LEN],
				 char *why, size_t len)
{
	for (unsigned i = 0; i < s->ntombs && i < 8; i++)
		if (!memcmp(s->tombs[i].id, id, XFER_SESSION_LEN)) {
			snprintf(why, len, "%s", s->tombs[i].why);
			return 1;
		}
	return 0;
}

void xfer_server_keepalive(int fd)
{
	int one = 1, idle = 15, intvl = 5, cnt = 3;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

void xfer_server_init(struct xfer_server *s, const struct xfer_serve_opts *o)
{
	s->o = o;
	s->dirfd = s->wake_fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->conns_cv, NULL);
	list_init(&s->pulls);
	list_init(&s->transfers);
	s->max_conns = o->max_conns ? o->max_conns : XFER_SERVE_MAX_CONNS;
	s->max_per_addr =
	    o->max_conns_per_addr ? o->max_conns_per_addr : XFER_SERVE_MAX_CONNS_PER_ADDR;
	s->max_files = o->max_files ? o->max_files : XFER_SERVE_MAX_FILES;
	s->handshake_ms = o->handshake_ms ? (int)o->handshake_ms : XFER_SERVE_HANDSHAKE_MS;
	s->frame_ms = o->frame_ms ? o->frame_ms : XFER_SERVE_FRAME_MS;
	s->min_rate = 1024ull * (o->min_rate_kib ? o->min_rate_kib : XFER_SERVE_MIN_RATE_KIB);
}

void xfer_server_destroy(struct xfer_server *s)
{
	if (s->dirfd >= 0)
		close(s->dirfd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	free(s->live);
	if (s->tls)
		net_tls_ctx_free(s->tls);
	OPENSSL_cleanse(&s->token, sizeof(s->token));
	/* mu and conns_cv stay: a connection thread's last unlock may still be in progress */
}

void xfer_server_shutdown_all(struct xfer_server *s)
{
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < s->nlive; i++)
		sock_abort(s->live[i].fd);
	pthread_mutex_unlock(&s->mu);
}
