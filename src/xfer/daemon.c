/*
 * daemon.c - xfer_serve(): the receiving daemon's accept loop, its caps and its connections.
 *
 * One thread accepts on every listen address (one per link); each connection gets a thread
 * that starts TLS or reads the plain magic, says CHALLENGE and checks the HELLO's token, then
 * hands the connection to its role: the receiving protocol (receiver.c) for a sender's
 * connection, the server side of `get` (pull.c) for a PULL one.
 *
 * Who may use it: serve needs a token or a client CA unless told --insecure. The accept loop
 * holds the caps (connections in all and per address: over them a connection gets ERR and is
 * closed; a `get` connection handed to a pull counts until the pull closes it), cuts a
 * handshake at its total deadline however slowly it trickles, and a sender's connection whose
 * frame runs past its own deadline (--frame-ms, --min-rate-kib: server.h), and, out of
 * descriptors, stops
 * polling the listeners until a connection ends (an eventfd) or a second passes, rather than
 * spinning. --metrics is answered on its own thread (metrics.c).
 */
#include "accelnet/xfer.h"
#include "core/clock.h"
#include "core/log.h"
#include "net/addr.h"
#include "net/sock.h"
#include "net/tls.h"
#include "xfer/conn.h"
#include "xfer/metrics.h"
#include "xfer/place.h"
#include "xfer/pull.h"
#include "xfer/receiver.h"
#include "xfer/server.h"
#include "xfer/store.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define SERVE_MAX_LISTEN XFER_LINKS_MAX
#define SERVE_ACCEPT_PAUSE_MS 1000 /* out of descriptors: accept again after this, or sooner */

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

static void *conn_main(void *arg)
{
	struct xfer_server_conn *c = arg;
	struct xfer_server *s = c->srv;
	struct xfer_hello hello;
	int handed = 0;
	const char *why = NULL;
	xfer_place_conn(c->io.fd, s->dirfd, s->o->numa_off); /* before its first read */
	xfer_server_keepalive(c->io.fd);
	/* each read waits at most the handshake's time, and the accept loop cuts the connection
	 * at its deadline however it trickles (xfer_server_expire) */
	xfer_set_timeout(c->io.fd, s->handshake_ms);
	int rc = xfer_conn_start_server(&c->io, s->tls, s->tls_required, &why);
	if (rc == 0)
		rc = xfer_handshake_server(&c->io, &s->token, &hello);
	xfer_server_settle(s, c->live_id);
	if (rc == -EACCES)
		atomic_fetch_add(&s->m_auth_fail, 1);
	xfer_set_timeout(c->io.fd, XFER_SERVER_IDLE_MS);
	if (rc == 0 && hello.role == XFER_ROLE_PULL) {
		handed = xfer_pull_serve(c, &hello);
	} else if (rc == 0) {
		xfer_server_watch(s, c->live_id, c); /* each frame has a deadline (server.h) */
		xfer_receiver_loop(c, &hello);
		xfer_server_watch(s, c->live_id, NULL);
	}
	if (c->rx)
		xfer_receiver_put(s, c->rx);
	struct net_conn io = c->io;
	uint64_t id = c->live_id;
	free(c);
	if (!handed) { /* a connection handed to a pull is closed, and given back, by the pull */
		xfer_server_unlist(s, id);
		net_conn_close(&io);
		xfer_server_release(s);
	}
	OPENSSL_thread_stop(); /* this thread's random and TLS state, before the process may end */
	pthread_mutex_lock(&s->mu); /* last: xfer_serve may return as soon as no thread is left */
	s->threads--;
	pthread_cond_broadcast(&s->conns_cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
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

static int relay_parse(struct xfer_server *s, const char *list, char *err, size_t errlen)
{
	char buf[XFER_ADDR_LIST_MAX + 1];
	char *save = NULL;
	if (list && strlen(list) > XFER_ADDR_LIST_MAX) {
		snprintf(err, errlen, "--relay-to: too long (at most %d characters)",
			 XFER_ADDR_LIST_MAX);
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (s->nrelay == sizeof(s->relay) / sizeof(s->relay[0])) {
			snprintf(err, errlen, "--relay-to: at most %zu networks",
				 sizeof(s->relay) / sizeof(s->relay[0]));
			return -EINVAL;
		}
		const char *why = NULL;
		if (net_cidr_parse(t, &s->relay[s->nrelay], &why)) {
			snprintf(err, errlen,
				 "--relay-to: '%s' is not an address or ADDRESS/BITS: %s", t, why);
			return -EINVAL;
		}
		s->nrelay++;
	}
	return 0;
}

/* Start a connection's thread, or refuse it when a cap is reached. */
static void conn_start(struct xfer_server *s, int fd, const struct sockaddr_storage *peer,
		       unsigned link)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	uint64_t id = 0;
	const char *full = xfer_server_admit(s, fd, peer, &id);
	if (full) {
		refuse_conn(fd, full);
		return;
	}
	atomic_fetch_add(&s->m_conns_total, 1);
	struct xfer_server_conn *c = calloc(1, sizeof(*c));
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
		xfer_server_unlist(s, id);
		close(fd);
		pthread_mutex_lock(&s->mu);
		s->threads--;
		pthread_mutex_unlock(&s->mu);
		xfer_server_release(s);
	}
	pthread_attr_destroy(&attr);
}

/* What the options ask before listening: who may connect (a token, TLS), --relay-to, the
 * directory. 0, or -errno with the reason in <err>. */
static int serve_prepare(struct xfer_server *s, const struct xfer_serve_opts *o, char *err,
			 size_t errlen)
{
	int rc;
	const char *env = getenv("ACCELNET_XFER_CORRUPT_EVERY");
	s->corrupt_every = env ? (unsigned)strtoul(env, NULL, 10) : 0;
	if (!o->token_file && !o->tls_ca && !o->insecure) {
		snprintf(err, errlen,
			 "refusing to serve %s to anyone who can connect: give --token FILE (or "
			 "--tls-ca FILE "
			 "for mutual TLS), or --insecure to accept that",
			 o->dir);
		return -EPERM;
	}
	if ((rc = relay_parse(s, o->relay_to, err, errlen)))
		return rc;
	if (o->token_file) {
		const char *why;
		if ((rc = xfer_token_load(o->token_file, &s->token, &why))) {
			snprintf(err, errlen, "%s: %s", o->token_file, why);
			return rc;
		}
	}
	if (o->tls_cert || o->tls_key || o->tls_ca) {
		struct net_tls_opts t = {.ca = o->tls_ca, .cert = o->tls_cert, .key = o->tls_key};
		if ((rc = net_tls_ctx_server(&t, &s->tls, err, errlen)))
			return rc;
		s->tls_required = o->tls_ca != NULL;
	}
	s->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->dirfd < 0 || s->wake_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", o->dir, strerror(errno));
		return rc;
	}
	return 0;
}

/* Listen on every address of --listen: the descriptors in <lfd> and their ports in <ports>,
 * s->nlisten of them. 0, or -errno with the reason in <err> (those opened stay in <lfd>). */
static int serve_listen(struct xfer_server *s, const char *list, int *lfd, int *ports, char *err,
			size_t errlen)
{
	char buf[XFER_ADDR_LIST_MAX + 1];
	if (list && strlen(list) > XFER_ADDR_LIST_MAX) {
		snprintf(err, errlen, "--listen: too long (at most %d characters)",
			 XFER_ADDR_LIST_MAX);
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned nl = s->nlisten;
		if (nl == SERVE_MAX_LISTEN) {
			snprintf(err, errlen, "at most %d listen addresses", SERVE_MAX_LISTEN);
			return -EINVAL;
		}
		int rc = listen_on(t, &lfd[nl], err, errlen);
		if (rc)
			return rc;
		ports[nl] = sock_local_port(lfd[nl]);
		snprintf(s->listen_names[nl], sizeof(s->listen_names[nl]), "%.63s", t);
		s->nlisten = nl + 1;
	}
	if (!s->nlisten) {
		snprintf(err, errlen, "no listen address");
		return -EINVAL;
	}
	return 0;
}

/*
 * Accept until *o->stop: the caps are held by xfer_server_admit, a handshake past its
 * deadline is cut, abandoned parts are swept hourly, and out of descriptors the listeners
 * rest until a connection ends (the wake-up eventfd) or a second passes.
 */
static void serve_accept_loop(struct xfer_server *s, const struct xfer_serve_opts *o,
			      const int *lfd)
{
	unsigned nl = s->nlisten;
	struct pollfd pfd[SERVE_MAX_LISTEN + 1];
	for (unsigned i = 0; i < nl; i++)
		pfd[i] = (struct pollfd){.fd = lfd[i], .events = POLLIN};
	pfd[nl] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
	uint64_t next_sweep = 0, resume_at = 0;
	uint64_t keep_s = o->keep_parts_hours ? (uint64_t)o->keep_parts_hours * 3600
					      : (uint64_t)XFER_SERVE_KEEP_PARTS_HOURS * 3600;
	while (!__atomic_load_n(o->stop, __ATOMIC_RELAXED)) { /* set by a signal or a thread */
		uint64_t now = clock_now_ms();
		if (now >= next_sweep) { /* at start, then hourly */
			unsigned removed;
			if (xfer_store_sweep(s->dirfd, keep_s, &removed) == 0 && removed)
				log_info("xfer serve: removed %u abandoned partial file(s) older "
					 "than %llu h",
					 removed, (unsigned long long)(keep_s / 3600));
			next_sweep = now + 3600 * 1000;
		}
		xfer_server_expire(s, now);
		int paused = atomic_load(&s->accept_paused);
		if (paused && now >= resume_at)
			atomic_store(&s->accept_paused, paused = 0);
		/* paused: only the wake-up (a connection ended) or the timer, not the listeners */
		int n = paused ? poll(&pfd[nl], 1, 200) : poll(pfd, nl + 1, 200);
		if (n <= 0)
			continue;
		if (pfd[nl].revents & POLLIN) {
			uint64_t v;
			ssize_t r = read(s->wake_fd, &v, sizeof(v));
			(void)r; /* drained or not, the next poll says */
			atomic_store(&s->accept_paused, 0);
		}
		for (unsigned i = 0; !paused && i < nl; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			struct sockaddr_storage peer;
			socklen_t plen;
			int fd = sock_accept(pfd[i].fd, &peer, &plen);
			if (sock_error_is_local(fd)) {
				/* no descriptor (or memory) for it: wait for one to free rather
				 * than spin */
				atomic_store(&s->accept_paused, 1);
				resume_at = clock_now_ms() + SERVE_ACCEPT_PAUSE_MS;
				log_warn_every(60000,
					       "xfer serve: cannot accept: %s; waiting for a "
					       "connection to end",
					       strerror(-fd));
				break;
			}
			if (fd >= 0)
				conn_start(s, fd, &peer, i);
		}
	}
}

int xfer_serve(const struct xfer_serve_opts *o)
{
	struct xfer_server s = {0};
	int lfd[SERVE_MAX_LISTEN], ports[SERVE_MAX_LISTEN];
	struct xfer_metrics *xm = NULL;
	int rc;
	char err[256] = "";
	xfer_server_init(&s, o);
	if ((rc = serve_prepare(&s, o, err, sizeof(err))) ||
	    (rc = serve_listen(&s, o->listen, lfd, ports, err, sizeof(err))) ||
	    (o->metrics &&
	     (rc = xfer_metrics_start(&s, o->metrics, o->stop, &xm, err, sizeof(err)))))
		goto out;
	if (!o->token_file && !o->tls_ca)
		log_warn("xfer serve: warning: --insecure: no token and no client certificates; "
			 "anyone who can reach "
			 "%s can read and overwrite every file under %s",
			 o->listen, o->dir);
	if (getenv("ACCELNET_XFER_HOLD_LAST_PART")) /* send.c's test knob, which GET answers use */
		log_warn("xfer serve: warning: ACCELNET_XFER_HOLD_LAST_PART is set: a knob for "
			 "tests, never for service: every GET's manifest holds its last part until "
			 "a path matches '%.100s', and fails after 20 s if none does",
			 getenv("ACCELNET_XFER_HOLD_LAST_PART"));
	if (o->ready)
		o->ready(ports, s.nlisten, o->arg);
	serve_accept_loop(&s, o, lfd);
	/* stop: end every connection, then wait for their threads */
	xfer_server_shutdown_all(&s);
	pthread_mutex_lock(&s.mu);
	while (s.conns || s.threads)
		pthread_cond_wait(&s.conns_cv, &s.mu);
	pthread_mutex_unlock(&s.mu);
out:
	xfer_metrics_stop(xm);
	if (err[0])
		fprintf(stderr, "accelnet xfer serve: %s\n", err);
	for (unsigned i = 0; i < s.nlisten; i++)
		close(lfd[i]);
	xfer_server_destroy(&s);
	return rc;
}
