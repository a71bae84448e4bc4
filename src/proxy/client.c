/*
 * client.c - a client connection's buffers, its reads (the transport's callbacks), its writes
 * and its end (see client.h).
 */
#include "proxy/client.h"
#include "proxy/upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

struct buf *client_out_buf(struct client *cl)
{
	if (!cl->out && !(cl->out = buf_get(&cl->w->bufs)))
		return NULL;
	buf_compact(cl->out);
	return cl->out;
}

int client_out_put(struct client *cl, const char *p, size_t n)
{
	struct buf *b = client_out_buf(cl);
	if (!b || buf_room(b) < n)
		return -ENOMEM;
	memcpy(b->data + b->end, p, n);
	b->end += (uint32_t)n;
	return 0;
}

/* The transport's alloc: the room at the end of cl->in (a buffer taken if need be). */
static int client_read_room(void *arg, char **p, size_t *len)
{
	struct client *cl = arg;
	if (!cl->in && !(cl->in = buf_get(&cl->w->bufs)))
		return -ENOMEM;
	if (!buf_room(cl->in))
		buf_compact(cl->in);
	if (!buf_room(cl->in))
		return -ENOSPC;
	*p = cl->in->data + cl->in->end;
	*len = buf_room(cl->in);
	return 0;
}

/* The transport's read: the bytes join cl->in; an end or a failure is noted. */
static void client_read_took(void *arg, ssize_t n)
{
	struct client *cl = arg;
	if (n > 0) {
		cl->in->end += (uint32_t)n;
		cl->read_got += (uint32_t)n;
	} else {
		cl->read_end = n ? (int)n : 1;
	}
}

static const struct net_conn_read_ops client_reads = {
    .alloc = client_read_room,
    .read = client_read_took,
};

ssize_t client_read(struct client *cl)
{
	if (!cl->read_end)
		net_conn_read_start(&cl->conn, &client_reads, cl);
	size_t got = cl->read_got; /* with what the transport read on an event before */
	cl->read_got = 0;
	if (got)
		return (ssize_t)got;
	if (cl->read_end)
		return cl->read_end == 1 ? 0 : cl->read_end;
	return cl->conn.readable ? -ENOSPC : -EAGAIN;
}

ssize_t client_read_idle(struct client *cl)
{
	ssize_t n = cl->conn.readable || cl->read_end ? client_read(cl) : -EAGAIN;
	if (n == -EAGAIN)
		worker_buf_release(cl->w, &cl->in);
	return n;
}

int client_flush(struct client *cl)
{
	while (client_out_pending(cl) && cl->writable) {
		ssize_t n = net_conn_write(&cl->conn, buf_head(cl->out), client_out_pending(cl));
		if (n == -EAGAIN || n == -EINTR) {
			cl->writable = 0;
			return 0;
		}
		if (n < 0)
			return (int)n;
		buf_consume(cl->out, (size_t)n);
	}
	return 0;
}

/* Move what cl->in holds into a fresh buffer of <pool>, giving the old one back. */
static int move_in(struct client *cl, struct buf_pool *pool)
{
	struct buf *b = buf_get(pool);
	if (!b)
		return -ENOMEM;
	memcpy(b->data, buf_head(cl->in), buf_len(cl->in));
	b->end = (uint32_t)buf_len(cl->in);
	worker_buf_put(cl->w, cl->in);
	cl->in = b;
	return 0;
}

int client_grow_in(struct client *cl)
{
	struct worker *w = cl->w;
	if (cl->in->cap >= w->body_bufs.size)
		return -ENOSPC;
	if (w->body_bufs.live >= BODY_BUFS_MAX)
		return -EBUSY;
	return move_in(cl, &w->body_bufs);
}

void client_shrink_in(struct client *cl)
{
	struct worker *w = cl->w;
	if (!cl->in || cl->in->cap == w->bufs.size || buf_len(cl->in) > w->bufs.size)
		return;
	if (!buf_len(cl->in)) {
		worker_buf_put(w, cl->in);
		cl->in = NULL;
		return;
	}
	(void)move_in(cl, &w->bufs); /* without memory the body buffer is kept a while longer */
}

/*
 * A client that shut its side, with nothing left to read, may have given up: the relay then
 * releases the backend (an accelerator generating tokens nobody will read) at once, closing
 * the upstream connection, the cancellation signal inference servers understand; or it may
 * only have half-closed, which the relay asks first while it can (relay.c, client_left()).
 */
int client_gone(struct client *cl)
{
	cl->hup_checked = 1;
	return net_conn_peer_closed(&cl->conn);
}

/* (after the peer's FIN a read says 0 even once a reset came: the socket's state tells) */
int client_reset(struct client *cl)
{
	int err = 0;
	socklen_t len = sizeof(err);
	struct tcp_info ti;
	socklen_t tlen = sizeof(ti);
	if (getsockopt(cl->conn.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
		return 1;
	return getsockopt(cl->conn.fd, IPPROTO_TCP, TCP_INFO, &ti, &tlen) == 0 &&
	       ti.tcpi_state == TCP_CLOSE;
}

int client_pending(const struct client *cl)
{
	return net_conn_pending(&cl->conn);
}

void client_close(struct client *cl)
{
	struct worker *w = cl->w;
	if (cl->x) {
		exchange_free(cl->x);
		cl->x = NULL;
		cl->h1 = NULL;
	}
	if (cl->codec_free)
		cl->codec_free(cl); /* HTTP/2's streams and their exchanges */
	loop_timer_stop(w->loop, &cl->timer);
	loop_io_del(w->loop, &cl->io);
	net_conn_close(&cl->conn);
	worker_buf_put(w, cl->in);
	worker_buf_put(w, cl->out);
	list_del(&w->clients, &cl->link);
	if (cl->ip_slot)
		atomic_fetch_sub_explicit(cl->ip_slot, 1, memory_order_relaxed);
	free(cl->tls_facts);
	free(cl);
	worker_client_gone(w);
}

enum run client_finish(struct client *cl)
{
	struct exchange *x = cl->x;
	struct worker *w = cl->w;
	exchange_count_response(x, x->status);
	x->relayed = 1;
	exchange_free_slot(x);
	/* its connection (none when the cache answered) is kept for reuse when it may be */
	attempt_end(x->att, w, x->att->reusable && x->req.done && !x->req.ready);
	int keep = cl->h1->client_keep && !w->draining && x->req.done;
	exchange_free(x);
	cl->x = NULL;
	cl->h1 = NULL;
	cl->served++;
	worker_buf_release(w, &cl->out);
	cl->phase_ms = loop_now(w->loop);
	if (!keep) {
		net_conn_shutdown(&cl->conn);
		cl->state = C_LINGER;
		return RUN_AGAIN;
	}
	cl->state = C_HEAD;
	http_head_reader_reset(&cl->head);
	worker_buf_release(w, &cl->in);
	return RUN_AGAIN;
}
