/*
 * server.c - the small origin server behind server.h.
 *
 * Each connection owns a growable input buffer and a growable output buffer: simplicity over
 * speed, since this serves the simulator and the admin pages, not the proxy path. A
 * connection is in one of three phases: reading a request, waiting for the handler's
 * answer (which may come from a timer much later), or streaming. Output is flushed
 * whenever the socket is writable.
 */
#include "http/server.h"
#include "core/check.h"
#include "http/chunked.h"
#include "http/status.h"
#include "net/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HSRV_MAX_HEAD 32768
#define HSRV_MAX_BODY (1u << 20)

struct hsrv {
	struct loop *loop;
	struct loop_io io;
	hsrv_handler_fn fn;
	void *arg;
	struct hsrv_conn *conns;
	unsigned long accepted;
};

enum phase { PH_READ, PH_WAIT, PH_STREAM };

struct hsrv_conn {
	struct loop_io io;
	struct hsrv *srv;
	struct hsrv_conn *prev, *next;
	enum phase phase;
	char *in, *out;
	size_t in_len, in_cap, out_off, out_len, out_cap;
	int close_after; /* close once the output is flushed */
	int keep_alive;	 /* for the current request */
	int is_head;
	int in_handler; /* the handler is running: closing is deferred */
	int sent_continue; /* 100 Continue already sent for the request being read */
	int dead;	/* closed while in the handler */
	size_t req_len;	/* bytes of the request being answered, consumed when done */
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
	loop_io_del(srv->loop, &c->io);
	close(c->io.fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c->in);
	free(c->out);
	free(c);
}

static void out_append(struct hsrv_conn *c, const char *data, size_t len)
{
	if (grow(&c->out, &c->out_cap, c->out_len + len) < 0) {
		c->close_after = 1;
		return;
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
}

static void conn_process(struct hsrv_conn *c);

/* Write what is pending. Returns -1 when the connection was closed. */
static int conn_flush(struct hsrv_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->io.fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			conn_close(c);
			return -1;
		}
		c->out_off += (size_t)n;
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
	if (!c->keep_alive)
		c->close_after = 1;
	if (conn_flush(c) < 0 || c->in_handler)
		return;
	conn_process(c);
}

void hsrv_respond(struct hsrv_conn *c, int status, const char *content_type,
		  const char *headers, const char *body, size_t len)
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
	int n = snprintf(size, sizeof(size), "%zx\r\n", len);
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

/* Find the end of a body starting at in[off]; returns total message length, 0, or -status. */
static long body_end(struct hsrv_conn *c, const struct http_head *h, size_t off,
		     char **body, size_t *body_len)
{
	if (h->framing == HTTP_BODY_NONE) {
		*body = c->in + off;
		*body_len = 0;
		return (long)off;
	}
	if (h->framing == HTTP_BODY_LENGTH) {
		if (h->content_length > HSRV_MAX_BODY)
			return -413;
		if (c->in_len - off < h->content_length)
			return 0;
		*body = c->in + off;
		*body_len = (size_t)h->content_length;
		return (long)(off + h->content_length);
	}
	/* chunked: first make sure the whole body is here, then decode it in place */
	struct http_chunked ch;
	http_chunked_init(&ch);
	size_t pos = off, payload = 0;
	int is_data;
	while (pos < c->in_len && !http_chunked_done(&ch)) {
		ssize_t n = http_chunked_scan(&ch, c->in + pos, c->in_len - pos, &is_data);
		if (n < 0)
			return -400;
		payload += is_data ? (size_t)n : 0;
		if (payload > HSRV_MAX_BODY)
			return -413;
		pos += (size_t)n;
	}
	if (!http_chunked_done(&ch))
		return 0;
	size_t end = pos, out = off;
	http_chunked_init(&ch);
	for (pos = off; pos < end;) {
		ssize_t n = http_chunked_scan(&ch, c->in + pos, end - pos, &is_data);
		ASSERT(n > 0);
		if (is_data) {
			memmove(c->in + out, c->in + pos, (size_t)n);
			out += (size_t)n;
		}
		pos += (size_t)n;
	}
	/* the payload now sits at in[off..out); drop the framing bytes after it */
	*body = c->in + off;
	*body_len = out - off;
	memmove(c->in + out, c->in + end, c->in_len - end);
	c->in_len -= end - out;
	return (long)out;
}

/* Handle as many complete requests as the buffer holds, one at a time. */
static void conn_process(struct hsrv_conn *c)
{
	struct http_head h;
	while (c->phase == PH_READ && c->in_len && !c->close_after) {
		int r = http_parse_request(c->in, c->in_len, HSRV_MAX_HEAD, &h);
		if (r == 0)
			return;
		if (r < 0) {
			reply_error(c, -r);
			return;
		}
		char *body;
		size_t body_len;
		long end = body_end(c, &h, (size_t)r, &body, &body_len);
		if (end == 0) {
			if ((h.flags & HTTP_F_EXPECT_CONTINUE) && !c->sent_continue) {
				c->sent_continue = 1;
				out_append(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
				conn_flush(c);
			}
			return;
		}
		c->sent_continue = 0;
		if (end < 0) {
			reply_error(c, (int)-end);
			return;
		}
		c->phase = PH_WAIT;
		c->req_len = (size_t)end;
		c->keep_alive = !(h.flags & HTTP_F_CLOSE);
		c->is_head = h.meth == HTTP_HEAD;
		c->in_handler = 1;
		c->srv->fn(c->srv->arg, c, &h, body, body_len);
		c->in_handler = 0;
		if (c->dead) {
			conn_close(c); /* runs the abort callback if the answer was unfinished */
			return;
		}
		/* answered already: go on with the next pipelined request, if any */
	}
}

static void conn_on_io(struct loop_io *io, unsigned events)
{
	struct hsrv_conn *c = container_of(io, struct hsrv_conn, io);
	if ((events & LOOP_WRITE) && conn_flush(c) < 0)
		return;
	if (!(events & (LOOP_READ | LOOP_HUP)))
		return;
	for (;;) {
		if (grow(&c->in, &c->in_cap, c->in_len + 4096) < 0) {
			conn_close(c);
			return;
		}
		ssize_t n = recv(io->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			conn_close(c);
			return;
		}
		if (n < 0)
			break;
		c->in_len += (size_t)n;
		if (c->in_len > HSRV_MAX_HEAD + HSRV_MAX_BODY + 65536) {
			conn_close(c);
			return;
		}
	}
	if (c->phase == PH_READ)
		conn_process(c);
}

static void srv_on_accept(struct loop_io *io, unsigned events)
{
	struct hsrv *srv = container_of(io, struct hsrv, io);
	(void)events;
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen;
		int fd = sock_accept(io->fd, &peer, &plen);
		if (fd < 0)
			return;
		struct hsrv_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->io.fd = fd;
		c->io.fn = conn_on_io;
		c->srv = srv;
		c->next = srv->conns;
		if (srv->conns)
			srv->conns->prev = c;
		srv->conns = c;
		srv->accepted++;
		if (loop_io_add(srv->loop, &c->io) < 0)
			conn_close(c);
	}
}

int hsrv_start(struct loop *loop, const struct net_addr *addr, hsrv_handler_fn fn, void *arg,
	       struct hsrv **out)
{
	struct hsrv *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	int fd = sock_listen(addr, 0);
	if (fd < 0) {
		free(srv);
		return fd;
	}
	srv->loop = loop;
	srv->io.fd = fd;
	srv->io.fn = srv_on_accept;
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

void hsrv_stop(struct hsrv *srv)
{
	if (!srv)
		return;
	while (srv->conns)
		conn_close(srv->conns);
	loop_io_del(srv->loop, &srv->io);
	close(srv->io.fd);
	free(srv);
}
