/*
 * kvreplay.c - the ring of kept batches and the ROUTER that replays them (kvreplay.h).
 *
 * The ring has <steps> slots, allocated at open; each slot keeps its payload's buffer when
 * it is reused and grows it only for a larger batch, so a steady load allocates nothing
 * once the ring has gone round. Requests are read until ZeroMQ has none (its descriptor is
 * edge-style) and each is answered at once, without blocking: a ROUTER never blocks a send,
 * it drops what its queue to that peer cannot take, as vLLM's does.
 */
#include "sim/kvreplay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct kept {
	uint64_t seq;
	void *data;
	size_t len, cap;
};

struct kvreplay {
	void *sock;
	struct kept *ring;
	unsigned steps, n, head; /* head: the slot the next batch takes */
	unsigned long requests;
	char endpoint[256];
};

int kvreplay_open(void *ctx, const char *endpoint, unsigned steps, struct kvreplay **out,
		  const char **why)
{
	int err = -ENOMEM, linger = 0;
	struct kvreplay *r = calloc(1, sizeof(*r));
	*why = "out of memory";
	if (!r || (steps && !(r->ring = calloc(steps, sizeof(*r->ring)))))
		goto fail;
	r->steps = steps;
	if (!(r->sock = zmq_socket(ctx, ZMQ_ROUTER)) ||
	    zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger)) < 0 ||
	    zmq_bind(r->sock, endpoint) < 0) {
		err = -(zmq_errno() ? zmq_errno() : EINVAL);
		*why = zmq_strerror(-err);
		goto fail;
	}
	size_t len = sizeof(r->endpoint);
	if (zmq_getsockopt(r->sock, ZMQ_LAST_ENDPOINT, r->endpoint, &len) < 0)
		snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
	*out = r;
	return 0;
fail:
	kvreplay_close(r);
	return err;
}

void kvreplay_close(struct kvreplay *r)
{
	if (!r)
		return;
	if (r->sock)
		zmq_close(r->sock);
	for (unsigned i = 0; r->ring && i < r->steps; i++)
		free(r->ring[i].data);
	free(r->ring);
	free(r);
}

int kvreplay_keep(struct kvreplay *r, uint64_t seq, const void *data, size_t len)
{
	if (!r->steps)
		return 0;
	struct kept *k = &r->ring[r->head];
	if (len > k->cap) {
		void *p = realloc(k->data, len);
		if (!p)
			return -ENOMEM;
		k->data = p;
		k->cap = len;
	}
	memcpy(k->data, data, len);
	k->len = len;
	k->seq = seq;
	r->head = (r->head + 1) % r->steps;
	if (r->n < r->steps)
		r->n++;
	return 0;
}

static void put_seq(unsigned char *b, uint64_t seq)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(seq >> (56 - 8 * i));
}

/* One answer message: [id, empty, seq, payload]. */
static void send_one(struct kvreplay *r, zmq_msg_t *id, const unsigned char *seq, const void *data,
		     size_t len)
{
	zmq_msg_t copy;
	zmq_msg_init(&copy);
	zmq_msg_copy(&copy, id);
	if (zmq_msg_send(&copy, r->sock, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&copy);
		return;
	}
	zmq_send(r->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(r->sock, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(r->sock, data, len, ZMQ_DONTWAIT);
}

/* The request whose identity is <id> and start frame <start>: every kept batch from there,
 * then the end. */
static void answer(struct kvreplay *r, zmq_msg_t *id, const zmq_msg_t *start)
{
	const unsigned char *b = zmq_msg_data((zmq_msg_t *)start);
	size_t n = zmq_msg_size((zmq_msg_t *)start);
	uint64_t from = 0;
	for (size_t i = 0; i < n; i++) /* as int.from_bytes(b, "big"): more than 8 saturate */
		from = from >> 56 ? UINT64_MAX : from << 8 | b[i];
	unsigned char seq[8];
	for (unsigned i = 0; i < r->n; i++) {
		const struct kept *k = &r->ring[(r->head + r->steps - r->n + i) % r->steps];
		if (k->seq < from)
			continue;
		put_seq(seq, k->seq);
		send_one(r, id, seq, k->data, k->len);
	}
	memset(seq, 0xff, sizeof(seq));
	send_one(r, id, seq, "", 0);
	r->requests++;
}

void kvreplay_serve(struct kvreplay *r)
{
	for (;;) {
		zmq_msg_t f[4];
		int nf = 0, more = 1;
		for (int i = 0; i < 4; i++)
			zmq_msg_init(&f[i]);
		while (more) {
			zmq_msg_t *m = &f[nf < 3 ? nf : 3];
			if (nf >= 3) {
				zmq_msg_close(m);
				zmq_msg_init(m);
			}
			if (zmq_msg_recv(m, r->sock, ZMQ_DONTWAIT) < 0)
				break;
			nf += nf < 4;
			more = zmq_msg_more(m);
		}
		if (!more && nf == 3) /* [identity, empty, start]: else ignored, as vLLM does */
			answer(r, &f[0], &f[2]);
		for (int i = 0; i < 4; i++)
			zmq_msg_close(&f[i]);
		if (more) /* nothing (more) waiting */
			return;
	}
}

int kvreplay_fd(const struct kvreplay *r)
{
	int fd = -1;
	size_t len = sizeof(fd);
	if (zmq_getsockopt(r->sock, ZMQ_FD, &fd, &len) < 0)
		return -1;
	return fd;
}

const char *kvreplay_endpoint(const struct kvreplay *r)
{
	return r->endpoint;
}

unsigned long kvreplay_requests(const struct kvreplay *r)
{
	return r->requests;
}
