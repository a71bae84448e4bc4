/*
 * get.c - xfer_get(): the client of `xfer get`, which receives what it asked a server for.
 *
 * The client opens every connection itself (streams per link, as a sender would), each one
 * dialed and authenticated by the one setup path (xfer_conn_open, role PULL, one random
 * session id for them all), and each says GET with the names and the number of connections
 * it opens. The server answers as a sender on those very connections (pull.c): so a client
 * behind a firewall or NAT can fetch, and no port opens on it. Each connection then runs the
 * receiving protocol (receiver.c) on its own thread, with this side's struct xfer_server in
 * puller mode: only names that were asked for are admitted, and the first refusal or server
 * ERR is kept as the reason the pull failed. The first connection that answers goes first:
 * the server makes it the sending side.
 */
#include "accelnet/xfer.h"
#include "core/clock.h"
#include "net/tls.h"
#include "xfer/conn.h"
#include "xfer/place.h"
#include "xfer/receiver.h"
#include "xfer/server.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct get_stream {
	struct xfer_server_conn *c;
	struct xfer_hello hello;
	pthread_t th;
};

static void *get_main(void *arg)
{
	struct get_stream *g = arg;
	struct xfer_server_conn *c = g->c;
	struct xfer_server *s = c->srv;
	xfer_place_conn(c->io.fd, s->dirfd, s->o->numa_off);
	xfer_receiver_loop(c, &g->hello);
	if (c->rx)
		xfer_receiver_put(s, c->rx);
	net_conn_close(&c->io);
	free(c);
	OPENSSL_thread_stop();
	return NULL;
}

/* What every connection needs to open: the names checked and their GET encoded, the TLS
 * context, the session id. 0, or -errno with rep->error set. */
static int get_prepare(const struct xfer_send_opts *o, const char *const *names, unsigned n,
		       uint32_t nconns, uint8_t **enc, size_t *enclen, struct ssl_ctx_st **tls,
		       struct xfer_hello *hello, struct xfer_report *rep)
{
	const char *why;
	int rc;
	if ((rc = xfer_get_encode(nconns, names, n, enc, enclen))) {
		snprintf(rep->error, sizeof(rep->error), "names too long");
		return rc;
	}
	for (unsigned i = 0; i < n; i++)
		if (xfer_path_check(names[i], strlen(names[i]), &why)) {
			snprintf(rep->error, sizeof(rep->error), "'%s': %s", names[i], why);
			return -EINVAL;
		}
	*hello = (struct xfer_hello){.version = XFER_VERSION, .role = XFER_ROLE_PULL};
	if (RAND_bytes(hello->session, sizeof(hello->session)) != 1)
		return -EIO;
	if (o->tls) {
		struct net_tls_opts t = {.ca = o->tls_ca,
					 .cert = o->tls_cert,
					 .key = o->tls_key,
					 .insecure = o->tls_insecure};
		if ((rc = net_tls_ctx_client(&t, tls, rep->error, sizeof(rep->error))))
			return rc;
	}
	return 0;
}

/* Open one connection on link <i>, say GET, and start its thread in gs[*ngs] (whose hello
 * the caller set). 0, -EACCES (refused: stop trying, the reason in rep->error), or another
 * -errno (an unreachable link says so in rep->error while no connection was <started>). */
static int get_stream_start(struct xfer_server *s, const struct xfer_path *p, unsigned i,
			    const struct xfer_dial *d, const uint8_t *enc, size_t enclen,
			    struct get_stream *gs, unsigned *ngs, int started,
			    struct xfer_report *rep)
{
	struct net_conn io;
	char err[256];
	int reached;
	int rc = xfer_conn_open(p, d, &io, &reached, err, sizeof(err));
	if (rc == 0 && (rc = xfer_frame_send(&io, XFER_GET, enc, (uint32_t)enclen)))
		net_conn_close(&io);
	if (rc) {
		if (!reached && !started)
			snprintf(rep->error, sizeof(rep->error), "%s", err);
		else if (rc == -EACCES)
			snprintf(rep->error, sizeof(rep->error), "server refused: %.200s", err);
		return rc;
	}
	xfer_set_timeout(io.fd, XFER_SERVER_IDLE_MS);
	xfer_server_keepalive(io.fd);
	struct xfer_server_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		net_conn_close(&io);
		return -ENOMEM;
	}
	*c = (struct xfer_server_conn){.srv = s, .io = io, .link = i};
	gs[*ngs].c = c; /* its hello set by the caller */
	if (pthread_create(&gs[*ngs].th, NULL, get_main, &gs[*ngs])) {
		net_conn_close(&c->io);
		free(c);
		return -EAGAIN;
	}
	(*ngs)++;
	return 0;
}

/* The report of a pull: what arrived, per link. */
static void get_report(struct xfer_server *s, const struct xfer_path *paths, int np, uint64_t t0,
		       struct xfer_report *rep)
{
	rep->seconds = (double)(clock_now_ns() - t0) / 1e9;
	rep->files = (uint32_t)atomic_load(&s->m_files);
	rep->parts = atomic_load(&s->parts);
	rep->chunks_bad = (uint32_t)atomic_load(&s->m_bad);
	rep->nlinks = np > 0 ? (unsigned)np : 0;
	for (unsigned i = 0; i < rep->nlinks; i++) {
		struct xfer_link_report *l = &rep->links[i];
		snprintf(l->remote, sizeof(l->remote), "%s", paths[i].rname);
		snprintf(l->local, sizeof(l->local), "%s", paths[i].lname);
		l->numa_node = -1; /* (a pull's links: not looked up) */
		l->bytes = atomic_load(&s->link_bytes[i]);
		l->gbps = rep->seconds > 0 ? (double)l->bytes * 8 / rep->seconds / 1e9 : 0;
		rep->bytes_acked += l->bytes;
	}
	rep->bytes_total = s->total_bytes;
	rep->bytes_skipped =
	    s->total_bytes > rep->bytes_acked ? s->total_bytes - rep->bytes_acked : 0;
}

int xfer_get(const struct xfer_send_opts *o, const char *const *names, unsigned n, const char *dest,
	     struct xfer_report *rep)
{
	struct xfer_server s = {0};
	struct xfer_serve_opts so = {.dir = dest, .numa_off = o->numa_off};
	struct xfer_path paths[XFER_LINKS_MAX];
	struct xfer_hello hello;
	struct get_stream *gs = NULL;
	unsigned ngs = 0, per = o->streams ? o->streams : XFER_SEND_STREAMS;
	uint8_t *enc = NULL;
	size_t enclen;
	int rc;
	uint64_t t0 = clock_now_ns();
	memset(rep, 0, sizeof(*rep));
	xfer_server_init(&s, &so);
	s.puller = 1;
	s.asked = names;
	s.nasked = n;
	int np = xfer_paths_parse(o->remote, o->local, paths, XFER_LINKS_MAX, rep->error,
				  sizeof(rep->error));
	if (np < 0)
		return np;
	const char *why;
	if (o->token_file && (rc = xfer_token_load(o->token_file, &s.token, &why))) {
		snprintf(rep->error, sizeof(rep->error), "token: %s", why);
		return rc;
	}
	if ((rc = get_prepare(o, names, n, (uint32_t)np * per, &enc, &enclen, &s.tls, &hello, rep)))
		goto out;
	s.dirfd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s.dirfd < 0) {
		rc = -errno;
		snprintf(rep->error, sizeof(rep->error), "%s: %s", dest, strerror(errno));
		goto out;
	}
	gs = calloc((size_t)np * per, sizeof(*gs));
	if (!gs) {
		rc = -ENOMEM;
		goto out;
	}
	int stall = o->stall_ms ? (int)o->stall_ms : XFER_SEND_STALL_MS;
	struct xfer_dial d = {.tls = s.tls,
			      .token = &s.token,
			      .role = XFER_ROLE_PULL,
			      .session = hello.session,
			      .connect_ms = stall,
			      .stall_ms = stall,
			      .cancel_fd = -1};
	rc = -EHOSTUNREACH;
	int refused = 0;
	for (unsigned k = 0; k < per && !refused; k++)
		for (int i = 0; i < np && !refused; i++) {
			gs[ngs].hello = hello;
			int src = get_stream_start(&s, &paths[i], (unsigned)i, &d, enc, enclen, gs,
						   &ngs, rc == 0, rep);
			if (src == 0)
				rc = 0;
			refused = src == -EACCES;
		}
	for (unsigned i = 0; i < ngs; i++)
		pthread_join(gs[i].th, NULL);
	if (ngs && !s.done_ok) {
		rc = -EIO;
		snprintf(rep->error, sizeof(rep->error), "%s",
			 s.peer_err[0] ? s.peer_err
				       : "the server went away before the transfer ended");
	} else if (!ngs && !rc) {
		rc = -EHOSTUNREACH;
	}
	if (s.done_ok)
		rc = 0;
out:
	get_report(&s, paths, np, t0, rep);
	if (rc && !rep->error[0])
		snprintf(rep->error, sizeof(rep->error), "%s", strerror(-rc));
	free(gs);
	free(enc);
	xfer_server_destroy(&s);
	return rc;
}
