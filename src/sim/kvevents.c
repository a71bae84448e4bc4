/*
 * kvevents.c - KV-cache events over ZeroMQ, encoded with msgpack-c.
 *
 * The events of a batch are packed into <body> as they come (each event's length is known
 * when it is packed: one call, one event); the flush wraps them in the batch envelope in
 * <msg> and sends the three frames. Both buffers keep their memory between batches, so a
 * steady load allocates nothing.
 *
 * The socket is an XPUB with ZMQ_XPUB_NODROP: to its subscribers it is a PUB, but when a
 * subscriber's queue is full it says EAGAIN instead of dropping silently, which lets the
 * drops be counted. The subscriptions it receives in exchange are read and discarded at
 * every flush.
 *
 * With a replay socket (kvevents_replay, sim/kvreplay.h) every batch numbered is kept there
 * as its payload was packed, sent or not (the one --kv-events-skip loses too: it was lost on
 * the way, not never made), and requests waiting are answered at every flush, before the
 * batch, as well as whenever its descriptor wakes the loop.
 */
#include "sim/kvevents.h"
#include "sim/kvreplay.h"

#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define SNDHWM 10000 /* batches queued per subscriber before sends fail */

struct kvevents {
	void *ctx, *sock;
	enum kvevents_format format;
	unsigned block_size;
	char topic[128];
	char endpoint[256];
	msgpack_sbuffer body, msg;
	msgpack_packer body_pk, msg_pk;
	size_t pending;		 /* events in body */
	size_t hashes;		 /* block hashes in them */
	int broken;		 /* a pack failed (out of memory): the batch is dropped */
	size_t tokens;		 /* token ids in them */
	uint64_t seq, skip;	 /* skip: the number of a batch not to send (0: none) */
	struct kvreplay *replay; /* or NULL */
	unsigned long batches, dropped;
};

static void pack_key(struct kvevents *e, const char *key)
{
	size_t n = strlen(key);
	e->broken |= msgpack_pack_str(&e->body_pk, n) | msgpack_pack_str_body(&e->body_pk, key, n);
}

/* The tag, and the event's map or array header for <fields> more fields. */
static void pack_head(struct kvevents *e, const char *tag, size_t fields)
{
	if (e->format == KVEVENTS_MAP) {
		e->broken |= msgpack_pack_map(&e->body_pk, fields + 1);
		pack_key(e, "type");
	} else {
		e->broken |= msgpack_pack_array(&e->body_pk, fields + 1);
	}
	pack_key(e, tag); /* a value, packed as a string all the same */
	e->pending++;
}

/* The fields after a BlockStored's hashes and a BlockRemoved's that SGLang's events lack. */
static int sglang(const struct kvevents *e)
{
	return e->format == KVEVENTS_SGLANG;
}

static void pack_field(struct kvevents *e, const char *key)
{
	if (e->format == KVEVENTS_MAP)
		pack_key(e, key);
}

/* A batch carries at most this many block hashes and token ids (a subscriber bounds what it
 * takes in one: accelnet's proxy 65536 and 1 Mi); more are sent as another batch. */
#define BATCH_HASHES_MAX 16384
#define BATCH_TOKENS_MAX 262144

/* Room for <n> more hashes and <tokens> ids in this batch: flush the batch first when it has
 * too many. */
static void room_for(struct kvevents *e, size_t n, size_t tokens)
{
	if (e->pending &&
	    (e->hashes + n > BATCH_HASHES_MAX || e->tokens + tokens > BATCH_TOKENS_MAX))
		kvevents_flush(e);
	e->hashes += n;
	e->tokens += tokens;
}

static void pack_hashes(struct kvevents *e, const uint64_t *hash, size_t n)
{
	pack_field(e, "block_hashes");
	e->broken |= msgpack_pack_array(&e->body_pk, n);
	for (size_t i = 0; i < n; i++)
		e->broken |= sglang(e) ? msgpack_pack_int64(&e->body_pk, (int64_t)hash[i])
				       : msgpack_pack_uint64(&e->body_pk, hash[i]);
}

static void pack_medium(struct kvevents *e)
{
	if (sglang(e))
		return;
	pack_field(e, "medium");
	pack_key(e, "GPU");
}

void kvevents_stored(struct kvevents *e, const uint64_t *hash, size_t n, const uint64_t *parent,
		     const uint32_t *ids)
{
	size_t ntok = ids ? n * e->block_size : 0;
	room_for(e, n, ntok);
	/* block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name
	 * (SGLang's: the first five) */
	pack_head(e, "BlockStored", sglang(e) ? 5 : 7);
	pack_hashes(e, hash, n);
	pack_field(e, "parent_block_hash");
	if (!parent)
		e->broken |= msgpack_pack_nil(&e->body_pk);
	else
		e->broken |= sglang(e) ? msgpack_pack_int64(&e->body_pk, (int64_t)*parent)
				       : msgpack_pack_uint64(&e->body_pk, *parent);
	pack_field(e, "token_ids");
	e->broken |= msgpack_pack_array(&e->body_pk, ntok);
	for (size_t i = 0; i < ntok; i++)
		e->broken |= msgpack_pack_uint32(&e->body_pk, ids[i]);
	pack_field(e, "block_size");
	e->broken |= msgpack_pack_unsigned_int(&e->body_pk, e->block_size);
	pack_field(e, "lora_id");
	e->broken |= msgpack_pack_nil(&e->body_pk);
	pack_medium(e);
	if (sglang(e))
		return;
	pack_field(e, "lora_name");
	e->broken |= msgpack_pack_nil(&e->body_pk);
}

void kvevents_removed(struct kvevents *e, const uint64_t *hash, size_t n)
{
	room_for(e, n, 0);
	pack_head(e, "BlockRemoved", sglang(e) ? 1 : 2); /* block_hashes, medium */
	pack_hashes(e, hash, n);
	pack_medium(e);
}

void kvevents_cleared(struct kvevents *e)
{
	pack_head(e, "AllBlocksCleared", 0);
}

static void drain_subscriptions(struct kvevents *e)
{
	char buf[256];
	while (zmq_recv(e->sock, buf, sizeof(buf), ZMQ_DONTWAIT) >= 0)
		;
}

void kvevents_flush(struct kvevents *e)
{
	if (!e->pending)
		return;
	drain_subscriptions(e);
	if (e->replay)
		kvreplay_serve(e->replay); /* requests that came before this batch */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t seq = e->seq++;
	unsigned char seq_be[8];
	for (int i = 0; i < 8; i++)
		seq_be[i] = (unsigned char)(seq >> (56 - 8 * i));
	/* [ts, events, data_parallel_rank] (SGLang's: [ts, events]) */
	msgpack_sbuffer_clear(&e->msg);
	int broken = e->broken;
	broken |= msgpack_pack_array(&e->msg_pk, sglang(e) ? 2 : 3);
	broken |= msgpack_pack_double(&e->msg_pk, (double)now.tv_sec + now.tv_nsec / 1e9);
	broken |= msgpack_pack_array(&e->msg_pk, e->pending);
	broken |= msgpack_sbuffer_write(&e->msg, e->body.data, e->body.size);
	if (!sglang(e))
		broken |= msgpack_pack_int(&e->msg_pk, 0);
	/* kept whether or not it goes out, as vLLM keeps what its PUB socket dropped */
	if (!broken && e->replay)
		kvreplay_keep(e->replay, seq, e->msg.data, e->msg.size);
	size_t tlen = strlen(e->topic);
	if (seq && seq == e->skip) /* lost on the way: a gap in the numbers */
		e->dropped += e->pending;
	else if (broken || zmq_send(e->sock, e->topic, tlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		e->dropped += e->pending;
	else if (zmq_send(e->sock, seq_be, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
		 zmq_send(e->sock, e->msg.data, e->msg.size, ZMQ_DONTWAIT) < 0)
		e->dropped += e->pending; /* not after the first frame: zmq sends all or none */
	else
		e->batches++;
	msgpack_sbuffer_clear(&e->body);
	e->pending = 0;
	e->hashes = 0;
	e->tokens = 0;
	e->broken = 0;
}

int kvevents_open(const char *endpoint, const char *topic, unsigned block_size,
		  enum kvevents_format format, struct kvevents **out, const char **why)
{
	int err = -ENOMEM, one = 1, hwm = SNDHWM, linger = 0;
	struct kvevents *e = calloc(1, sizeof(*e));
	*why = "out of memory";
	if (!e)
		return err;
	e->format = format;
	e->block_size = block_size;
	snprintf(e->topic, sizeof(e->topic), "%s", topic);
	msgpack_sbuffer_init(&e->body);
	msgpack_sbuffer_init(&e->msg);
	msgpack_packer_init(&e->body_pk, &e->body, msgpack_sbuffer_write);
	msgpack_packer_init(&e->msg_pk, &e->msg, msgpack_sbuffer_write);
	if (!(e->ctx = zmq_ctx_new()) || !(e->sock = zmq_socket(e->ctx, ZMQ_XPUB)))
		goto fail_errno;
	if (zmq_setsockopt(e->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) < 0 ||
	    zmq_setsockopt(e->sock, ZMQ_LINGER, &linger, sizeof(linger)) < 0 ||
	    zmq_setsockopt(e->sock, ZMQ_XPUB_NODROP, &one, sizeof(one)) < 0)
		goto fail_errno;
	if (zmq_bind(e->sock, endpoint) < 0)
		goto fail_errno;
	size_t len = sizeof(e->endpoint);
	if (zmq_getsockopt(e->sock, ZMQ_LAST_ENDPOINT, e->endpoint, &len) < 0)
		snprintf(e->endpoint, sizeof(e->endpoint), "%s", endpoint);
	*out = e;
	return 0;
fail_errno:
	err = -(zmq_errno() ? zmq_errno() : EINVAL);
	*why = zmq_strerror(-err);
	kvevents_close(e);
	return err;
}

void kvevents_close(struct kvevents *e)
{
	if (!e)
		return;
	kvreplay_close(e->replay);
	if (e->sock)
		zmq_close(e->sock);
	if (e->ctx)
		zmq_ctx_term(e->ctx);
	msgpack_sbuffer_destroy(&e->body);
	msgpack_sbuffer_destroy(&e->msg);
	free(e);
}

const char *kvevents_endpoint(const struct kvevents *e)
{
	return e->endpoint;
}

void kvevents_skip(struct kvevents *e, uint64_t seq)
{
	e->skip = seq;
}

unsigned long kvevents_batches(const struct kvevents *e)
{
	return e->batches;
}

unsigned long kvevents_dropped(const struct kvevents *e)
{
	return e->dropped;
}

uint64_t kvevents_next_seq(const struct kvevents *e)
{
	return e->seq;
}

int kvevents_replay(struct kvevents *e, const char *endpoint, unsigned steps, const char **why)
{
	return kvreplay_open(e->ctx, endpoint, steps, &e->replay, why);
}

int kvevents_replay_fd(const struct kvevents *e)
{
	return e->replay ? kvreplay_fd(e->replay) : -1;
}

void kvevents_replay_serve(struct kvevents *e)
{
	if (e->replay)
		kvreplay_serve(e->replay);
}

const char *kvevents_replay_endpoint(const struct kvevents *e)
{
	return e->replay ? kvreplay_endpoint(e->replay) : "";
}

unsigned long kvevents_replays(const struct kvevents *e)
{
	return e->replay ? kvreplay_requests(e->replay) : 0;
}
