/*
 * server.c - the small origin server behind server.h.
 *
 * Each connection owns a growable input buffer and a growable output buffer: simplicity over
 * speed, since this serves the simulator and the admin pages, not the proxy path. A
 * connection is in one of three phases: reading a request, waiting for the handler's
 * answer (which may come from a timer much later), or streaming. Output is flushed
 * whenever the socket is writable. Bytes move through the transport (net/conn.h), never
 * recv()/send() here; the codec is the proxy's: the strict head parser (http/parse.h) and
 * the body framing tracker (http/body.h), fed the buffer as it grows, so a request body is
 * scanned once however it is split. A chunked body, once whole, is decoded in place (the
 * payload moved together over its framing) before the handler sees it.
 *
 * Bounds, so that a client cannot grow us: once more than OUT_PAUSE bytes of answers wait
 * unsent, the connection stops reading and answering (the kernel's buffers then push back
 * on the client) until the client has read them. The input is bounded by the largest
 * request. Each connection has one timer, armed lazily: it fires no later than the nearest
 * deadline (conn_deadline) and, when it fires early because progress was made, re-arms.
 * The listener stops for ACCEPT_RETRY_MS when the process is out of descriptors; it is
 * edge-triggered, so it always accepts until the backlog is empty.
 */
#include "http/server.h"
#include "core/check.h"
#include "core/list.h"
#include "core/log.h"
#include "http/body.h"
#include "http/chunked.h"
#include "http/rewrite.h"
#include "http/status.h"
#include "net/conn.h"
#include "net/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HSRV_MAX_HEAD 32768
/* Unsent answer bytes past which a connection reads and answers nothing more. */
#define OUT_PAUSE 65536
#define ACCEPT_RETRY_MS 200

struct hsrv {
	struct loop *loop;
	struct loop_io io;
	struct loop_timer accept_retry; /* after running out of descriptors */
	struct hsrv_limits lim;
	hsrv_handler_fn fn;
	void *arg;
	struct list_head conns; /* of struct hsrv_conn, by link */
	unsigned long accepted;
	int draining; /* stopped listening: every connection closes after its answer */
};

enum phase { PH_READ, PH_WAIT, PH_STREAM };

struct hsrv_conn {
	struct loop_io io; /* io.fd is nc.fd */
	struct net_conn nc;
	struct loop_timer timer; /* see conn_deadline */
	struct hsrv *srv;
	struct list_node link; /* on srv->conns */
	enum phase phase;
	char *in, *out;
	size_t in_len, in_cap, out_off, out_len, out_cap;
	int close_after; /* close once the output is flushed */
	int keep_alive;	 /* for the current request */
	int is_head;
	int in_handler;		      /* the handler is running: closing is deferred */
	int sent_continue;	      /* 100 Continue already sent for the request being read */
	struct http_head_reader head; /* the request head being read */
	int dead;		      /* closed while in the handler */
	int readable;		      /* a read edge seen and not yet drained to EAGAIN */
	uint64_t head_ms; /* when the request being read (or the connection) began; 0: none */
	uint64_t last_ms; /* the last byte read or written */
	size_t req_len;	  /* bytes of the request being answered, consumed when done */
	size_t body_off;  /* where the body of the request being read starts; 0: head not seen */
	struct http_body body; /* its framing, scanned as bytes arrive (valid with body_off) */
	hsrv_abort_fn abort_fn;
	void *abort_arg;
};

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap : 4096;
	while (ncap < need)
		ncap *= 2;
	char *np = realloc(*p, ncap);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

static void conn_close(struct hsrv_conn *c)
{
	struct hsrv *srv = c->srv;
	if (c->in_handler) {
		c->dead = 1;
		return;
	}
	if (c->phase != PH_READ && c->abort_fn)
		c->abort_fn(c->abort_arg);
	loop_timer_stop(srv->loop, &c->timer);
	loop_io_del(srv->loop, &c->io);
	net_conn_close(&c->nc);
	list_del(&srv->conns, &c->link);
	free(c->in);
	free(c->out);
	free(c);
}

static void out_append(struct hsrv_conn *c, const char *data, size_t len)
{
	if (c->out_off == c->out_len)
		c->last_ms = loop_now(c->srv->loop); /* the client's time to read starts now */
	if (c->out_off && c->out_len + len > c->out_cap) {
		/* make room from what was sent before growing, so a slow reader does not grow it */
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (grow(&c->out, &c->out_cap, c->out_len + len) < 0) {
		c->close_after = 1;
		return;
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
}

static int conn_pump(struct hsrv_conn *c);

/* Answers wait unsent past the bound: read and answer nothing more for now. */
static int conn_backlogged(const struct hsrv_conn *c)
{
	return c->out_len - c->out_off > OUT_PAUSE;
}

/*
 * When <c> must be closed unless something happens first, or 0 for no deadline: the client
 * must read its pending answer, or finish the request it began, or send one before it has
 * been idle too long. While the handler works on an answer, there is no deadline.
 */
static uint64_t conn_deadline(const struct hsrv_conn *c)
{
	const struct hsrv_limits *lim = &c->srv->lim;
	if (c->out_off < c->out_len)
		return lim->idle_ms ? c->last_ms + lim->idle_ms : 0;
	if (c->phase != PH_READ)
		return 0;
	if (c->head_ms)
		return lim->header_ms ? c->head_ms + lim->header_ms : 0;
	return lim->idle_ms ? c->last_ms + lim->idle_ms : 0;
}

/* Make sure the timer fires no later than the deadline (it may fire earlier, see above). */
static void conn_arm(struct hsrv_conn *c)
{
	uint64_t d = conn_deadline(c);
	if (d && (!loop_timer_armed(&c->timer) || d < c->timer.deadline_ms))
		loop_timer_set(c->srv->loop, &c->timer, d);
}

static void conn_on_timer(struct loop_timer *t)
{
	struct hsrv_conn *c = container_of(t, struct hsrv_conn, timer);
	uint64_t d = conn_deadline(c);
	if (!d)
		return; /* the handler has it; conn_done arms again */
	if (loop_now(c->srv->loop) < d) {
		loop_timer_set(c->srv->loop, &c->timer, d);
		return;
	}
	if (c->phase == PH_READ && c->head_ms && c->out_off == c->out_len) {
		static const char msg[] = "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
					  "Connection: close\r\n\r\n";
		ssize_t n = net_conn_write(&c->nc, msg, sizeof(msg) - 1);
		(void)n; /* best effort: the connection closes either way */
	}
	conn_close(c);
}

/* Write what is pending. Returns -1 when the connection was closed. */
static int conn_flush(struct hsrv_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = net_conn_write(&c->nc, c->out + c->out_off, c->out_len - c->out_off);
		if (n == -EAGAIN) {
			conn_arm(c);
			return 0;
		}
		if (n < 0) {
			conn_close(c);
			return -1;
		}
		c->out_off += (size_t)n;
		c->last_ms = loop_now(c->srv->loop);
	}
	c->out_off = c->out_len = 0;
	if (c->close_after && c->phase == PH_READ) {
		conn_close(c);
		return -1;
	}
	return 0;
}

static void head_append(struct hsrv_conn *c, int status, const char *content_type,
			const char *headers, const char *framing)
{
	char head[1024];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s%s\r\n",
			 status, http_status_text(status), content_type, headers, framing,
			 c->keep_alive ? "" : "Connection: close\r\n");
	out_append(c, head, (size_t)n < sizeof(head) ? (size_t)n : sizeof(head) - 1);
}

/* The response is complete: go back to reading, or close. */
static void conn_done(struct hsrv_conn *c)
{
	c->phase = PH_READ;
	c->abort_fn = NULL;
	memmove(c->in, c->in + c->req_len, c->in_len - c->req_len);
	c->in_len -= c->req_len;
	c->req_len = 0;
	c->last_ms = loop_now(c->srv->loop);
	if (!c->keep_alive)
		c->close_after = 1;
	if (conn_flush(c) < 0 || c->in_handler)
		return;
	conn_pump(c);
}

void hsrv_close_after(struct hsrv_conn *c)
{
	c->keep_alive = 0;
}

void hsrv_respond(struct hsrv_conn *c, int status, const char *content_type, const char *headers,
		  const char *body, size_t len)
{
	char cl[64];
	ASSERT(c->phase == PH_WAIT);
	snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", len);
	head_append(c, status, content_type, headers, cl);
	if (!c->is_head)
		out_append(c, body, len);
	conn_done(c);
}

int hsrv_stream_begin(struct hsrv_conn *c, int status, const char *content_type,
		      const char *headers)
{
	ASSERT(c->phase == PH_WAIT);
	head_append(c, status, content_type, headers, "Transfer-Encoding: chunked\r\n");
	c->phase = PH_STREAM;
	return conn_flush(c);
}

int hsrv_stream_write(struct hsrv_conn *c, const char *data, size_t len)
{
	char size[32];
	ASSERT(c->phase == PH_STREAM);
	if (!len)
		return 0;
	int n = rewrite_chunk_size(size, sizeof(size), len);
	out_append(c, size, (size_t)n);
	out_append(c, data, len);
	out_append(c, "\r\n", 2);
	return conn_flush(c);
}

void hsrv_stream_end(struct hsrv_conn *c)
{
	ASSERT(c->phase == PH_STREAM);
	out_append(c, "0\r\n\r\n", 5);
	conn_done(c);
}

void hsrv_on_abort(struct hsrv_conn *c, hsrv_abort_fn fn, void *arg)
{
	c->abort_fn = fn;
	c->abort_arg = arg;
}

static void reply_error(struct hsrv_conn *c, int status)
{
	char body[128];
	int n = snprintf(body, sizeof(body), "%d %s\n", status, http_status_text(status));
	c->phase = PH_WAIT;
	c->keep_alive = 0;
	c->is_head = 0;
	hsrv_respond(c, status, "text/plain", "", body, (size_t)n);
}

/*
 * Decode the chunked body p[0..len) (whole, already checked by http_body_scan) in place: the
 * payload ends up at p[0..returned).
 */
static size_t chunked_decode(char *p, size_t len)
{
	struct http_chunked ch;
	size_t pos = 0, out = 0;
	int is_data;
	http_chunked_init(&ch);
	while (pos < len) {
		ssize_t n = http_chunked_scan(&ch, p + pos, len - pos, &is_data);
		ASSERT(n > 0);
		if (is_data) {
			memmove(p + out, p + pos, (size_t)n);
			out += (size_t)n;
		}
		pos += (size_t)n;
	}
	return out;
}

/*
 * Track the body of the request whose head (<h>, <head_len> bytes) is at the front of the
 * input. Returns the length of the whole request once its body is here (a chunked body then
 * decoded in place, *body and *body_len its payload), 0 while more must arrive, or -status.
 */
static long body_end(struct hsrv_conn *c, const struct http_head *h, size_t head_len, char **body,
		     size_t *body_len)
{
	uint64_t limit = c->srv->lim.max_body;
	if (!c->body_off) {
		if (h->framing == HTTP_BODY_LENGTH && h->content_length > limit)
			return -413;
		http_body_init(&c->body, h->framing, h->content_length);
		c->body_off = head_len;
	}
	int rc = http_body_scan(&c->body, c->in + head_len, c->in_len - head_len, limit);
	if (rc < 0)
		return rc;
	if (!c->body.done)
		return 0;
	size_t end = head_len + c->body.ready;
	*body = c->in + head_len;
	*body_len = c->body.ready;
	if (h->framing == HTTP_BODY_CHUNKED) {
		/* drop the framing bytes: what follows the payload moves down over them */
		*body_len = chunked_decode(*body, c->body.ready);
		memmove(*body + *body_len, c->in + end, c->in_len - end);
		c->in_len -= c->body.ready - *body_len;
		end = head_len + *body_len;
	}
	http_body_sent(&c->body, c->body.ready);
	return (long)end;
}

/* A request has begun and is not whole yet: it has header_ms from now to arrive. */
static void conn_request_begun(struct hsrv_conn *c)
{
	if (!c->head_ms) {
		c->head_ms = loop_now(c->srv->loop);
		conn_arm(c);
	}
}

/* Answer a malformed request and close. Returns -1 when the connection was closed. */
static int conn_refuse(struct hsrv_conn *c, int status)
{
	c->in_handler = 1; /* closing is deferred until the answer is queued */
	reply_error(c, status);
	c->in_handler = 0;
	if (c->dead) {
		conn_close(c);
		return -1;
	}
	return 0;
}

/*
 * Handle as many complete requests as the buffer holds, one at a time, while their answers
 * are not piling up unread. Returns -1 when the connection was closed.
 */
static int conn_process(struct hsrv_conn *c)
{
	struct http_head h;
	while (c->phase == PH_READ && c->in_len && !c->close_after && !conn_backlogged(c)) {
		int r = http_head_read(&c->head, c->in, c->in_len, HSRV_MAX_HEAD, &h);
		if (r == 0) {
			conn_request_begun(c);
			return 0;
		}
		if (r < 0)
			return conn_refuse(c, -r);
		char *body;
		size_t body_len;
		long end = body_end(c, &h, (size_t)r, &body, &body_len);
		if (end == 0) {
			conn_request_begun(c);
			if ((h.flags & HTTP_F_EXPECT_CONTINUE) && !c->sent_continue) {
				char cont[32];
				int n = rewrite_continue(cont, sizeof(cont));
				c->sent_continue = 1;
				out_append(c, cont, (size_t)n);
				return conn_flush(c);
			}
			return 0;
		}
		c->sent_continue = 0;
		c->body_off = 0;
		http_head_reader_reset(&c->head);
		if (end < 0)
			return conn_refuse(c, (int)-end);
		c->head_ms = 0;
		c->phase = PH_WAIT;
		c->req_len = (size_t)end;
		c->keep_alive = !(h.flags & HTTP_F_CLOSE) && !c->srv->draining;
		c->is_head = h.meth == HTTP_HEAD;
		c->in_handler = 1;
		c->srv->fn(c->srv->arg, c, &h, body, body_len);
		c->in_handler = 0;
		if (c->dead) {
			conn_close(c); /* runs the abort callback if the answer was unfinished */
			return -1;
		}
		/* answered already: go on with the next pipelined request, if any */
	}
	return 0;
}

/* Read once. 1: bytes came, 0: nothing more for now, -1: the connection was closed. */
static int conn_read(struct hsrv_conn *c)
{
	if (grow(&c->in, &c->in_cap, c->in_len + 4096) < 0) {
		conn_close(c);
		return -1;
	}
	ssize_t n = net_conn_read(&c->nc, c->in + c->in_len, c->in_cap - c->in_len);
	if (n == -EAGAIN) {
		c->readable = 0;
		return 0;
	}
	if (n <= 0 || c->in_len + (size_t)n > HSRV_MAX_HEAD + c->srv->lim.max_body + 65536) {
		conn_close(c);
		return -1;
	}
	c->in_len += (size_t)n;
	c->last_ms = loop_now(c->srv->loop);
	return 1;
}

/*
 * Answer what has arrived and read more, until the client has nothing more to say or its
 * answers pile up unread. Returns -1 when the connection was closed.
 */
static int conn_pump(struct hsrv_conn *c)
{
	for (;;) {
		if (c->phase == PH_READ && conn_process(c) < 0)
			return -1;
		if (!c->readable || c->close_after || conn_backlogged(c))
			break;
		if (conn_read(c) < 0)
			return -1;
	}
	conn_arm(c);
	return 0;
}

static void conn_on_io(struct loop_io *io, unsigned events)
{
	struct hsrv_conn *c = container_of(io, struct hsrv_conn, io);
	if (events & (LOOP_READ | LOOP_HUP))
		c->readable = 1;
	/* on a hang-up too: a client gone while its answers wait makes the send fail now */
	if ((events & (LOOP_WRITE | LOOP_HUP)) && conn_flush(c) < 0)
		return;
	conn_pump(c);
}

/* Over the cap: say so and close, rather than hold the client or leave it in the backlog. */
static void srv_turn_away(int fd)
{
	static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
				  "Connection: close\r\n\r\n";
	struct net_conn nc;
	net_conn_init(&nc, fd);
	ssize_t n = net_conn_write(&nc, msg, sizeof(msg) - 1);
	(void)n; /* best effort */
	net_conn_close(&nc);
}

/* Accept until the backlog is empty, or descriptors run out (then retry on a timer). */
static void srv_accept(struct hsrv *srv)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen;
		int fd = sock_accept(srv->io.fd, &peer, &plen);
		if (fd == -EAGAIN)
			return;
		if (fd == -ECONNABORTED || fd == -EINTR || fd == -EPROTO)
			continue;
		if (fd < 0) {
			log_warn_every(10000,
				       "accept: %s; new clients wait until a descriptor frees",
				       strerror(-fd));
			loop_timer_set(srv->loop, &srv->accept_retry,
				       loop_now(srv->loop) + ACCEPT_RETRY_MS);
			return;
		}
		if (srv->lim.max_conns && srv->conns.count >= srv->lim.max_conns) {
			log_warn_every(10000, "%u connections open: turning new clients away",
				       (unsigned)srv->conns.count);
			srv_turn_away(fd);
			continue;
		}
		struct hsrv_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		net_conn_init(&c->nc, fd);
		c->io.fd = fd;
		c->io.fn = conn_on_io;
		c->timer.fn = conn_on_timer;
		c->srv = srv;
		c->head_ms = c->last_ms = loop_now(srv->loop);
		list_push_front(&srv->conns, &c->link);
		srv->accepted++;
		if (loop_io_add(srv->loop, &c->io) < 0) {
			conn_close(c);
			continue;
		}
		conn_arm(c);
	}
}

static void srv_on_accept(struct loop_io *io, unsigned events)
{
	(void)events;
	srv_accept(container_of(io, struct hsrv, io));
}

static void srv_on_accept_retry(struct loop_timer *t)
{
	srv_accept(container_of(t, struct hsrv, accept_retry));
}

int hsrv_start(struct loop *loop, const struct net_addr *addr, const struct hsrv_limits *lim,
	       hsrv_handler_fn fn, void *arg, struct hsrv **out)
{
	int fd = sock_listen(addr, 0);
	if (fd < 0)
		return fd;
	return hsrv_start_fd(loop, fd, lim, fn, arg, out);
}

int hsrv_start_fd(struct loop *loop, int fd, const struct hsrv_limits *lim, hsrv_handler_fn fn,
		  void *arg, struct hsrv **out)
{
	struct hsrv *srv = lim->max_body ? calloc(1, sizeof(*srv)) : NULL;
	if (!srv) {
		close(fd);
		return lim->max_body ? -ENOMEM : -EINVAL;
	}
	list_init(&srv->conns);
	srv->loop = loop;
	srv->io.fd = fd;
	srv->io.fn = srv_on_accept;
	srv->accept_retry.fn = srv_on_accept_retry;
	srv->lim = *lim;
	srv->fn = fn;
	srv->arg = arg;
	int err = loop_io_add(loop, &srv->io);
	if (err) {
		close(fd);
		free(srv);
		return err;
	}
	*out = srv;
	return 0;
}

int hsrv_port(const struct hsrv *srv)
{
	return sock_local_port(srv->io.fd);
}

unsigned long hsrv_connections(const struct hsrv *srv)
{
	return srv->accepted;
}

int hsrv_listen_fd(const struct hsrv *srv)
{
	return srv->io.fd;
}

void hsrv_stop_listening(struct hsrv *srv)
{
	if (!srv || srv->io.fd < 0)
		return;
	loop_timer_stop(srv->loop, &srv->accept_retry);
	loop_io_del(srv->loop, &srv->io);
	close(srv->io.fd);
	srv->io.fd = -1;
	srv->draining = 1;
	struct list_node *n = list_first(&srv->conns), *next;
	for (; n; n = next) {
		next = list_next(&srv->conns, n);
		struct hsrv_conn *c = container_of(n, struct hsrv_conn, link);
		if (c->phase == PH_READ && !c->in_len && !c->in_handler &&
		    !net_conn_pending(&c->nc))
			conn_close(c); /* idle */
		else
			c->keep_alive = 0; /* its answer says Connection: close */
	}
}

void hsrv_stop(struct hsrv *srv)
{
	if (!srv)
		return;
	struct list_node *n;
	while ((n = list_first(&srv->conns)))
		conn_close(container_of(n, struct hsrv_conn, link));
	hsrv_stop_listening(srv);
	free(srv);
}

char *hsrv_peer(const struct hsrv_conn *c, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getpeername(c->nc.fd, (struct sockaddr *)&ss, &sl) < 0) {
		snprintf(out, len, "?");
		return out;
	}
	return net_addr_format((const struct sockaddr *)&ss, out, len);
}
