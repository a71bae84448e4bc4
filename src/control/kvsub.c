/*
 * kvsub.c - the subscribers behind kvsub.h. ZeroMQ does the connecting, reconnecting and
 * framing on its own I/O thread; what reaches this loop is ZMQ_FD, a descriptor that turns
 * readable when the socket's state may have changed, edge-style: on each wake-up we read
 * ZMQ_EVENTS and take messages until it shows none, or until a turn's budget is spent:
 * MSGS_PER_TURN messages or BYTES_PER_TURN bytes of payload decoded. A large batch is
 * decoded and applied in parts of whole events (kvevent_decode_part), about a turn's bytes
 * each, so no one message holds the loop either; the rest of it waits with the socket's
 * other messages. What is left waits for the look timer, set REST_FACTOR times as far ahead
 * as taking the budget took, and at least REST_MIN_MS, and until it has run the descriptors'
 * wake-ups leave the sockets to it: so a publisher flooding large batches gets at most about
 * a quarter of the main thread and BYTES_PER_TURN per REST_MIN_MS (100 MiB/s; an engine's
 * batches are kilobytes), and the health checks, the admin API and the rest of the main
 * thread keep their turns (what cannot be taken waits in ZeroMQ's queue, then the
 * publisher's, which drops: a gap, and the index is cleared unless a replay fills it). A
 * slow timer also looks at every socket now and then, in case an edge was missed. A replay's
 * DEALER (below, "the replay after a gap") is taken in the same turns and budget, in place
 * of its SUB socket while it lasts.
 *
 * Memory: ZeroMQ holds at most RCV_HWM messages of at most MAX_MSG bytes per socket (what
 * arrives beyond that waits in the kernel and the publisher's queue), and the decoder's
 * room is fixed: a flood costs at most RCV_HWM * MAX_MSG per backend (and during a replay
 * REPLAY_HWM + 1 more messages: the answer's queue and the batch held).
 *
 * A message is [topic, seq, payload]: anything else is malformed. The topic is not looked
 * at (we subscribe to all). ZMQ_MAXMSGSIZE bounds a payload, and the decoder's room bounds
 * a part's events and hashes; one event with more hashes than that room makes the message
 * malformed. A part applied before the rest is found malformed stays applied until the
 * index is cleared, which a malformed message always does; a lost connection drops the rest
 * of a message being taken (the index is cleared then too).
 */
#include "control/kvsub.h"
#include "control/kvmap.h"
#include "core/clock.h"
#include "core/log.h"
#include "obs/kvevent.h"
#include "policy/prefix_index.h"
#include "policy/prefix_pending.h"
#include "runtime/llm.h"
#include "runtime/proxy_metric.h"
#include "tok/tokmodel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define MSGS_PER_TURN 256	  /* messages taken from all sockets per turn */
#define BYTES_PER_TURN (1u << 20) /* ... and payload bytes */
#define MAX_MSG (16ll << 20)	  /* a bigger message makes ZeroMQ drop the connection */
#define RCV_HWM 8		  /* messages ZeroMQ holds for us (1000 by default: 16 GiB) */
#define BATCH_EVENTS 4096	  /* events of one batch, at most */
#define BATCH_HASHES 65536	  /* block hashes of one batch, at most */
#define BATCH_TOKENS (1u << 20)	  /* ... and token ids */
#define REST_FACTOR 3		  /* a spent budget rests 3 times as long as it took */
#define REST_MIN_MS 10		  /* ... and at least this long */
#define LOOK_MS 1000		  /* the slow look at every socket */
#define RECONNECT_MS 500	  /* ZeroMQ's first wait before reconnecting */
#define RECONNECT_MAX_MS 5000	  /* ... and its longest */
#define REPLAY_MS 2000		  /* a replay's whole answer, at most */
#define REPLAY_GAP_MAX 10000	  /* batches a replay may fill (vLLM keeps 10000 by default) */
#define REPLAY_HWM 8		  /* replayed messages ZeroMQ holds for us */
#define REPLAY_BACKOFF_MS 1000	  /* after a replay that did not fill its gap, none this long */

struct kvsub_one {
	struct loop_io io;     /* the SUB socket's ZMQ_FD */
	struct loop_io mon_io; /* the monitor's */
	struct kvsub *k;
	struct backend *be;
	void *sock, *mon;
	uint64_t next_seq;
	int counting;  /* next_seq is known: a message came since the last connect */
	int connected; /* the monitor said connected at least once */
	int busy;      /* <payload> is being taken in parts, <cur> where it stands */
	zmq_msg_t payload;
	struct kvevent_cursor cur;
	struct kvmap *map; /* engine hash -> own, once a BlockStored carried token ids */
	int learning;	   /* its thread was lost: balance: llm learns, until AllBlocksCleared */
	/* a replay under way (kv_events_replay): the batches from <gap_from> to <held_seq> were
	 * missed; they are asked for on <rsock> and applied as they come (<next_seq> the next
	 * wanted), then <held>, the batch numbered <held_seq> that showed the gap */
	void *rsock; /* the DEALER; NULL: none under way */
	struct loop_io rio;
	struct loop_timer rtimer; /* its deadline */
	uint64_t gap_from, held_seq;
	zmq_msg_t held;
	uint64_t replay_after; /* no replay asked before (loop ms): one failed just before */
};

struct kvsub {
	struct loop *loop;
	void *ctx;
	struct kvsub_one *subs;
	size_t n;
	struct kvevent_batch batch;
	struct loop_timer look;
	int backlog;	      /* a turn's budget was spent: the look timer takes the rest */
	size_t next;	      /* the socket the look timer serves first */
	unsigned msgs, bytes; /* what this turn took so far */
};

/* The pending table beside <s>'s index: the blocks balance: llm sent there that the events
 * have not confirmed (NULL: none, the index is not the one a balancer reads). */
static struct prefix_pending *pending_of(const struct kvsub_one *s)
{
	const struct llm_backend *l = s->be->llm;
	return l && l->prefix == s->be->kv_prefix ? l->pending : NULL;
}

/* The index now holds these blocks, as the engine said: no longer a guess. */
static void confirmed(struct kvsub_one *s, const uint64_t *h, uint32_t n)
{
	struct prefix_pending *p = pending_of(s);
	if (p)
		prefix_pending_remove(p, h, n);
}

/* What <s> knows of its engine is dropped. An engine whose events carry token ids keeps the
 * index balance: llm reads: that backend falls back to learning from the prompts sent there
 * (as without kv_events, the events still applied on top) until the engine's next
 * AllBlocksCleared says what it holds again. */
static void forget(struct kvsub_one *s, int lost)
{
	prefix_index_clear(s->be->kv_prefix);
	if (pending_of(s))
		prefix_pending_clear(pending_of(s), clock_now_ms());
	if (s->map)
		kvmap_clear(s->map);
	struct llm_backend *l = s->be->llm;
	if (lost && s->map && l && l->prefix == s->be->kv_prefix && !s->learning) {
		s->learning = 1;
		atomic_store_explicit(&l->exact, 0, memory_order_relaxed);
	}
}

/* The index of <s>'s backend no longer mirrors its engine. */
static void lost_thread(struct kvsub_one *s, const char *why)
{
	forget(s, 1);
	backend_count(s->be, PM_BACKEND_KV_GAPS, 1);
	log_warn_every(10000,
		       "KV events of backend %s (pool %s): %s; its prefix index is cleared%s",
		       s->be->name, s->be->pool->name, why,
		       s->learning ? "; balance: llm learns from the prompts sent there until the "
				     "engine's next AllBlocksCleared"
				   : "");
}

static void malformed(struct kvsub_one *s, const char *why)
{
	forget(s, 1); /* its events are missed */
	backend_count(s->be, PM_BACKEND_KV_MALFORMED, 1);
	log_warn_every(10000, "KV events of backend %s (pool %s): a message dropped: %s",
		       s->be->name, s->be->pool->name, why);
}

/* A BlockStored with the token ids of its blocks: each keyed by our own chain hash of them,
 * from its parent's (known from an earlier BlockStored, else it cannot be chained and its
 * blocks stay unknown) or the chain's seed. A LoRA adapter's blocks never match a prompt of
 * the base model: not kept. */
static void stored_tokens(struct kvsub_one *s, const struct kvevent_batch *b,
			  const struct kvevent *e)
{
	uint64_t own = TOKMODEL_CHAIN_SEED;
	if (!s->map && kvmap_new(prefix_index_capacity(s->be->kv_prefix), &s->map) < 0)
		return;
	if (e->lora || (e->has_parent && !kvmap_get(s->map, e->parent, &own)))
		return;
	for (uint32_t i = 0; i < e->n; i++) {
		own = tokmodel_block_hash(own, b->tok + e->tok_first + (size_t)i * e->block_size,
					  e->block_size);
		if (kvmap_put(s->map, b->hash[e->first + i], own) < 0)
			return;
		prefix_index_insert(s->be->kv_prefix, &own, 1);
		confirmed(s, &own, 1);
	}
}

static void removed(struct kvsub_one *s, const uint64_t *h, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t own = h[i]; /* our hash already, unless the map knows it */
		if (s->map)
			kvmap_take(s->map, h[i], &own);
		prefix_index_remove(s->be->kv_prefix, &own, 1);
		confirmed(s, &own, 1); /* (gone, not pending either) */
	}
}

static void apply(struct kvsub_one *s, const struct kvevent_batch *b)
{
	for (size_t i = 0; i < b->nev; i++) {
		const struct kvevent *e = &b->ev[i];
		const uint64_t *h = b->hash + e->first;
		if (e->kind == KVEVENT_STORED && e->ntok && e->block_size &&
		    e->block_size <= TOKMODEL_BLOCK_MAX &&
		    (uint64_t)e->n * e->block_size == e->ntok)
			stored_tokens(s, b, e);
		else if (e->kind == KVEVENT_STORED) {
			prefix_index_insert(s->be->kv_prefix, h, e->n);
			confirmed(s, h, e->n);
		} else if (e->kind == KVEVENT_REMOVED)
			removed(s, h, e->n);
		else if (s->learning) { /* a fresh state: exact again */
			forget(s, 0);
			s->learning = 0;
			atomic_store_explicit(&s->be->llm->exact, 1, memory_order_relaxed);
			static struct log_rate again; /* (an engine drives how often) */
			log_rated(&again, 10000, LOG_INFO,
				  "KV events of backend %s (pool %s): AllBlocksCleared: its prefix "
				  "index follows the events alone again",
				  s->be->name, s->be->pool->name);
		} else
			forget(s, 0);
		metrics_add(metrics_shard_self(s->be->metrics), PM_BACKEND_KV_EVENTS,
			    s->be->id * KVEVENT_KINDS + e->kind, 1);
	}
}

/* <s>'s payload is taken (or given up): the next message may come. */
static void done(struct kvsub_one *s)
{
	zmq_msg_close(&s->payload);
	zmq_msg_init(&s->payload);
	s->busy = 0;
}

static void replay_failed(struct kvsub_one *s, enum kv_replay why);
static void replay_filled(struct kvsub_one *s);
static int take_frames(struct kvsub_one *s, void *sock,
		       void (*fn)(struct kvsub_one *s, zmq_msg_t *f, int nf));

/* The next part of <s>'s payload, within what is left of the turn's bytes: applied. Events
 * of a batch found malformed further on were applied already: the index is cleared then, as
 * for any malformed message (a replayed one ends its replay too). */
static void feed(struct kvsub_one *s)
{
	struct kvsub *k = s->k;
	size_t was = s->cur.at;
	int rc = kvevent_decode_part(zmq_msg_data(&s->payload), zmq_msg_size(&s->payload), &s->cur,
				     &k->batch, BYTES_PER_TURN - k->bytes);
	k->bytes += (unsigned)(s->cur.at - was);
	if (rc < 0) {
		malformed(s, rc == -E2BIG ? "an event with more block hashes than a batch may hold"
					  : "the payload is not a KVEventBatch");
		done(s);
		if (s->rsock)
			replay_failed(s, KV_REPLAY_MALFORMED);
		return;
	}
	apply(s, &k->batch);
	if (rc == 0) {
		atomic_store_explicit(&s->be->kv_next_seq, s->next_seq, memory_order_relaxed);
		done(s);
		if (s->rsock && s->next_seq == s->held_seq)
			replay_filled(s);
	}
}

/* <s>'s payload becomes <m> (moved), batch <seq>, taken from its first event. */
static void begin(struct kvsub_one *s, zmq_msg_t *m, uint64_t seq)
{
	s->next_seq = seq + 1;
	zmq_msg_move(&s->payload, m);
	s->cur = (struct kvevent_cursor){0};
	s->busy = 1;
}

/* --- the replay after a gap --------------------------------------------------------------
 * An engine that keeps its last batches for a replay (vLLM's replay_endpoint and
 * buffer_steps) answers a DEALER's [empty, first sequence number wanted] with each kept
 * batch from there on as [empty, seq, payload], then [empty, -1, empty] (obs/kvevent.h,
 * kvevent_replay_frame). On a gap <s> holds the message that showed it, stops taking its
 * SUB socket's (they wait in ZeroMQ's queue of RCV_HWM), asks a DEALER of its own for the
 * missed ones, and applies them in order as they come, in the same turns and budget as the
 * SUB socket's; the last one applied, the held message follows and the SUB socket's again,
 * the index never cleared. Batches the answer repeats are skipped; past the held one it is
 * not read further (the DEALER is closed, what else comes dropped). The answer fails -- the
 * index is then cleared and the held message applied as without a replay -- when it skips
 * a number wanted (the engine no longer keeps it, or dropped some of its answer at a full
 * queue), ends first, is malformed (a frame or a payload), or is not whole within
 * REPLAY_MS; a gap wider than REPLAY_GAP_MAX is not asked for, nor one within
 * REPLAY_BACKOFF_MS of a replay that did not fill its gap (a publisher whose every batch
 * makes a gap, and a replay socket that cannot fill them, would otherwise cost a new
 * connection to the engine per batch: thousands a second). One replay at a time per
 * backend, one message held: memory stays within RCV_HWM + REPLAY_HWM messages of at most
 * MAX_MSG. */

static void replay_count(struct kvsub_one *s, enum kv_replay outcome)
{
	if (outcome != KV_REPLAY_FILLED && outcome != KV_REPLAY_BACKOFF)
		s->replay_after = loop_now(s->k->loop) + REPLAY_BACKOFF_MS;
	metrics_add(metrics_shard_self(s->be->metrics), PM_BACKEND_KV_REPLAYS,
		    s->be->id * KV_REPLAY_OUTCOMES + outcome, 1);
}

/* The DEALER closed: nothing of the answer is read any more. */
static void replay_close(struct kvsub_one *s)
{
	if (!s->rsock)
		return;
	loop_timer_stop(s->k->loop, &s->rtimer);
	if (s->rio.fd >= 0)
		loop_io_del(s->k->loop, &s->rio);
	s->rio.fd = -1;
	zmq_close(s->rsock);
	s->rsock = NULL;
}

#define KV_REPLAY_TEXT(name, label, text) [KV_REPLAY_##name] = text,
static const char *const replay_words[KV_REPLAY_OUTCOMES] = {KV_REPLAY_LIST(KV_REPLAY_TEXT)};
#undef KV_REPLAY_TEXT

/* The replay could not fill the gap: cleared as without one, then the held message. */
static void replay_failed(struct kvsub_one *s, enum kv_replay why)
{
	char text[192];
	replay_close(s);
	if (s->busy)
		done(s); /* the rest of a replayed batch */
	replay_count(s, why);
	snprintf(text, sizeof(text),
		 "sequence number %llu where %llu was next, and the replay could not fill the "
		 "gap (%s)",
		 (unsigned long long)s->held_seq, (unsigned long long)s->gap_from,
		 replay_words[why]);
	lost_thread(s, text);
	begin(s, &s->held, s->held_seq);
}

/* Every batch missed is applied: the held one next. */
static void replay_filled(struct kvsub_one *s)
{
	replay_close(s);
	replay_count(s, KV_REPLAY_FILLED);
	static struct log_rate filled; /* (an engine drives how often) */
	log_rated(&filled, 10000, LOG_INFO,
		  "KV events of backend %s (pool %s): sequence number %llu where %llu was next: "
		  "the %llu batches missed replayed from %s, the prefix index kept",
		  s->be->name, s->be->pool->name, (unsigned long long)s->held_seq,
		  (unsigned long long)s->gap_from, (unsigned long long)(s->held_seq - s->gap_from),
		  s->be->conf->kv_events_replay);
	begin(s, &s->held, s->held_seq);
}

/* A gap: batches next_seq .. seq - 1 were missed, <m> is batch <seq>. 0: a replay is under
 * way and holds <m>; -1: none could be asked for (the caller goes on as without one). */
static int replay_start(struct kvsub_one *s, uint64_t seq, zmq_msg_t *m)
{
	int zero = 0, hwm = REPLAY_HWM;
	int64_t max = MAX_MSG;
	unsigned char want[8];
	if (seq - s->next_seq > REPLAY_GAP_MAX) {
		replay_count(s, KV_REPLAY_TOO_WIDE);
		return -1;
	}
	if (loop_now(s->k->loop) < s->replay_after) {
		replay_count(s, KV_REPLAY_BACKOFF);
		return -1;
	}
	for (int i = 0; i < 8; i++)
		want[i] = (unsigned char)(s->next_seq >> (56 - 8 * i));
	size_t len = sizeof(s->rio.fd);
	if (!(s->rsock = zmq_socket(s->k->ctx, ZMQ_DEALER)) ||
	    zmq_setsockopt(s->rsock, ZMQ_LINGER, &zero, sizeof(zero)) < 0 ||
	    zmq_setsockopt(s->rsock, ZMQ_MAXMSGSIZE, &max, sizeof(max)) < 0 ||
	    zmq_setsockopt(s->rsock, ZMQ_RCVHWM, &hwm, sizeof(hwm)) < 0 ||
	    zmq_connect(s->rsock, s->be->conf->kv_events_replay) < 0 ||
	    zmq_send(s->rsock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(s->rsock, want, sizeof(want), ZMQ_DONTWAIT) < 0 ||
	    zmq_getsockopt(s->rsock, ZMQ_FD, &s->rio.fd, &len) < 0 ||
	    loop_io_add(s->k->loop, &s->rio) < 0) {
		log_warn_every(10000, "KV events of backend %s: cannot ask %s for a replay: %s",
			       s->be->name, s->be->conf->kv_events_replay, zmq_strerror(errno));
		s->rio.fd = -1;
		if (s->rsock)
			zmq_close(s->rsock);
		s->rsock = NULL;
		return -1;
	}
	s->gap_from = s->next_seq;
	s->held_seq = seq;
	zmq_msg_move(&s->held, m);
	loop_timer_set(s->k->loop, &s->rtimer, loop_now(s->k->loop) + REPLAY_MS);
	return 0;
}

/* One message of frames <f>[0..nf) of the answer. */
static void replay_take(struct kvsub_one *s, zmq_msg_t *f, int nf)
{
	size_t size[3] = {0, 0, 0};
	uint64_t seq;
	for (int i = 0; i < 3 && i < nf; i++)
		size[i] = zmq_msg_size(&f[i]);
	int rc = kvevent_replay_frame(nf, size, nf > 1 ? zmq_msg_data(&f[1]) : NULL, &seq);
	if (rc < 0)
		replay_failed(s, KV_REPLAY_MALFORMED);
	else if (rc == 0 || seq > s->next_seq)
		replay_failed(s, KV_REPLAY_NOT_KEPT); /* the end first, or a number skipped */
	else if (seq == s->next_seq) {
		begin(s, &f[2], seq);
		feed(s);
	} /* else a batch taken already */
}

/* Read one whole message of <s>'s replay answer: 1 taken, 0 none waiting. */
static int replay_take_one(struct kvsub_one *s)
{
	return take_frames(s, s->rsock, replay_take);
}

/* One message of frames <f>[0..nf) (nf is 4 when there were more than 3). */
static void take(struct kvsub_one *s, zmq_msg_t *f, int nf)
{
	uint64_t seq;
	if (nf != 3 || kvevent_seq(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &seq) < 0) {
		malformed(s, "not [topic, 8-byte sequence number, payload]");
		return;
	}
	if (s->counting && seq > s->next_seq && s->be->conf->kv_events_replay &&
	    replay_start(s, seq, &f[2]) == 0)
		return; /* <f>[2] held until the batches missed are in */
	if (s->counting && seq != s->next_seq) {
		char why[96];
		snprintf(why, sizeof(why), "sequence number %llu where %llu was next",
			 (unsigned long long)seq, (unsigned long long)s->next_seq);
		lost_thread(s, why);
	}
	s->counting = 1;
	begin(s, &f[2], seq);
	feed(s);
}

/* Read one whole message from <sock> and give it to <fn>: 1 taken, 0 none waiting, -1 the
 * socket failed. */
static int take_frames(struct kvsub_one *s, void *sock,
		       void (*fn)(struct kvsub_one *s, zmq_msg_t *f, int nf))
{
	zmq_msg_t f[4];
	int nf = 0, more = 1, rc = 1;
	for (int i = 0; i < 4; i++)
		zmq_msg_init(&f[i]);
	while (more) {
		zmq_msg_t *m = &f[nf < 3 ? nf : 3];
		if (nf >= 3) { /* a frame past the third: keep none of it */
			zmq_msg_close(m);
			zmq_msg_init(m);
		}
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			/* a multipart message arrives whole: only the first frame can be missing */
			rc = errno == EAGAIN && nf == 0 ? 0 : -1;
			goto out;
		}
		if (nf < 4)
			nf++;
		more = zmq_msg_more(m);
	}
	fn(s, f, nf);
out:
	for (int i = 0; i < 4; i++)
		zmq_msg_close(&f[i]);
	return rc;
}

/* Read one whole message of the SUB socket: as take_frames. */
static int take_one(struct kvsub_one *s)
{
	return take_frames(s, s->sock, take);
}

static int spent(const struct kvsub *k)
{
	return k->msgs >= MSGS_PER_TURN || k->bytes >= BYTES_PER_TURN;
}

/* Take what waits on <s>'s socket, within the turn's budget; 1 when more may wait. */
static int drain(struct kvsub_one *s)
{
	while (!spent(s->k)) {
		if (s->busy) {
			feed(s);
			continue;
		}
		s->k->msgs++;
		int rc = s->rsock ? replay_take_one(s) : take_one(s);
		if (rc < 0)
			log_warn_every(10000, "KV events of backend %s: %s", s->be->name,
				       zmq_strerror(errno));
		if (rc <= 0)
			return 0;
	}
	return 1;
}

/* What the socket monitor says: a connect starts a new count, a lost connection clears. */
static void watch(struct kvsub_one *s)
{
	for (;;) {
		zmq_msg_t ev, addr;
		zmq_msg_init(&ev);
		zmq_msg_init(&addr);
		if (zmq_msg_recv(&ev, s->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			zmq_msg_close(&addr);
			return;
		}
		uint16_t what = 0;
		if (zmq_msg_size(&ev) >= 2)
			memcpy(&what, zmq_msg_data(&ev), sizeof(what)); /* native order */
		if (zmq_msg_more(&ev))
			(void)zmq_msg_recv(&addr, s->mon, ZMQ_DONTWAIT);
		zmq_msg_close(&ev);
		zmq_msg_close(&addr);
		if (s->rsock && (what == ZMQ_EVENT_CONNECTED || what == ZMQ_EVENT_DISCONNECTED)) {
			replay_close(s); /* its thread is lost: so is what it held */
			replay_count(s, KV_REPLAY_ABANDONED);
			zmq_msg_close(&s->held);
			zmq_msg_init(&s->held);
			if (what == ZMQ_EVENT_CONNECTED) /* (a disconnect clears below) */
				lost_thread(s, "connected again during a replay");
		}
		if (s->busy && (what == ZMQ_EVENT_CONNECTED || what == ZMQ_EVENT_DISCONNECTED))
			done(s); /* the rest of a message from before: its thread is lost */
		if (what == ZMQ_EVENT_CONNECTED) {
			if (s->connected)
				log_info("KV events of backend %s: connected again", s->be->name);
			s->connected = 1;
			s->counting = 0;
		} else if (what == ZMQ_EVENT_DISCONNECTED) {
			s->counting = 0;
			lost_thread(s, "the connection to the publisher was lost");
		}
	}
}

static int pending(void *sock)
{
	int ev = 0;
	size_t len = sizeof(ev);
	return zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

/* Everything <s> has waiting; 1 when a turn's worth was left for later. */
static int service(struct kvsub_one *s)
{
	if (pending(s->mon))
		watch(s);
	int more = 0;
	while (s->busy || pending(s->rsock ? s->rsock : s->sock))
		if ((more = drain(s)))
			break;
	if (pending(s->mon))
		watch(s); /* after the messages that came before a disconnect */
	return more;
}

/* A turn's budget, begun at <t0>, was spent: the rest waits for the look timer, REST_FACTOR
 * times as long as this took and at least REST_MIN_MS, so that the events take at most
 * about a quarter of the thread. */
static void later(struct kvsub *k, uint64_t t0)
{
	uint64_t now = clock_now_ms(), rest = now > t0 ? REST_FACTOR * (now - t0) : 0;
	k->backlog = 1;
	loop_timer_set(k->loop, &k->look, now + (rest > REST_MIN_MS ? rest : REST_MIN_MS));
}

/* A wake-up of <s>'s socket or monitor: served now with a budget of its own, unless a
 * backlog waits for the look timer (which then serves every socket, the one that spent its
 * budget last); a wake-up that spends its budget hands the rest to the timer. */
static void wake(struct kvsub_one *s)
{
	struct kvsub *k = s->k;
	if (k->backlog)
		return;
	uint64_t t0 = clock_now_ms();
	k->msgs = k->bytes = 0;
	if (service(s))
		later(k, t0);
}

static void on_io(struct loop_io *io, unsigned events)
{
	(void)events;
	wake(container_of(io, struct kvsub_one, io));
}

static void on_mon_io(struct loop_io *io, unsigned events)
{
	(void)events;
	wake(container_of(io, struct kvsub_one, mon_io));
}

static void on_replay_io(struct loop_io *io, unsigned events)
{
	(void)events;
	wake(container_of(io, struct kvsub_one, rio));
}

/* The replay's deadline: the gap unfilled, the held message and the SUB socket's follow. */
static void on_replay_timeout(struct loop_timer *t)
{
	struct kvsub_one *s = container_of(t, struct kvsub_one, rtimer);
	if (!s->rsock)
		return;
	replay_failed(s, KV_REPLAY_TIMEOUT);
	wake(s);
}

static void on_look(struct loop_timer *t)
{
	struct kvsub *k = container_of(t, struct kvsub, look);
	uint64_t t0 = clock_now_ms();
	k->msgs = k->bytes = 0;
	for (size_t i = 0; i < k->n; i++) {
		size_t j = (k->next + i) % k->n;
		if (service(&k->subs[j])) {
			k->next = (j + 1) % k->n; /* the others first next time */
			later(k, t0);
			return;
		}
	}
	k->backlog = 0;
	loop_timer_set(k->loop, t, loop_now(k->loop) + LOOK_MS);
}

static int zmq_err(void)
{
	return errno ? -errno : -EIO;
}

/* The SUB socket and its monitor for <s>: 0 or -errno. */
static int subscribe(struct kvsub *k, struct kvsub_one *s, size_t i)
{
	char inproc[64];
	int zero = 0, ivl = RECONNECT_MS, ivl_max = RECONNECT_MAX_MS, hwm = RCV_HWM;
	int64_t max = MAX_MSG;
	if (!(s->sock = zmq_socket(k->ctx, ZMQ_SUB)) ||
	    zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof(zero)) < 0 ||
	    zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &max, sizeof(max)) < 0 ||
	    zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm)) < 0 ||
	    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl)) < 0 ||
	    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max)) < 0 ||
	    zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, "", 0) < 0)
		return zmq_err();
	snprintf(inproc, sizeof(inproc), "inproc://accelnet-kv-%zu", i);
	if (zmq_socket_monitor(s->sock, inproc, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) < 0 ||
	    !(s->mon = zmq_socket(k->ctx, ZMQ_PAIR)) ||
	    zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof(zero)) < 0 ||
	    zmq_connect(s->mon, inproc) < 0)
		return zmq_err();
	/* connect after the monitor listens, so that the first connect is seen */
	if (zmq_connect(s->sock, s->be->conf->kv_events) < 0)
		return zmq_err();
	size_t len = sizeof(s->io.fd);
	if (zmq_getsockopt(s->sock, ZMQ_FD, &s->io.fd, &len) < 0)
		return zmq_err();
	len = sizeof(s->mon_io.fd);
	if (zmq_getsockopt(s->mon, ZMQ_FD, &s->mon_io.fd, &len) < 0)
		return zmq_err();
	int rc = loop_io_add(k->loop, &s->io);
	if (rc < 0) {
		s->io.fd = -1;
		return rc;
	}
	if ((rc = loop_io_add(k->loop, &s->mon_io)) < 0)
		s->mon_io.fd = -1;
	return rc;
}

int kvsub_start(struct loop *loop, struct runtime *rt, struct kvsub **out)
{
	int rc = -ENOMEM;
	struct kvsub *k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->loop = loop;
	k->look.fn = on_look;
	*out = k;
	size_t want = 0;
	for (size_t i = 0; i < rt->nbackends; i++)
		want += rt->backend_by_id[i]->conf->kv_events != NULL;
	if (!want)
		return 0;
	k->subs = calloc(want, sizeof(*k->subs));
	k->batch.ev = calloc(BATCH_EVENTS, sizeof(*k->batch.ev));
	k->batch.hash = calloc(BATCH_HASHES, sizeof(*k->batch.hash));
	k->batch.tok = calloc(BATCH_TOKENS, sizeof(*k->batch.tok));
	k->batch.ev_cap = BATCH_EVENTS;
	k->batch.hash_cap = BATCH_HASHES;
	k->batch.tok_cap = BATCH_TOKENS;
	if (!k->subs || !k->batch.ev || !k->batch.hash || !k->batch.tok ||
	    !(k->ctx = zmq_ctx_new()))
		goto fail;
	for (size_t i = 0; i < rt->nbackends; i++) {
		struct backend *be = rt->backend_by_id[i];
		if (!be->conf->kv_events || !be->kv_prefix)
			continue;
		struct kvsub_one *s = &k->subs[k->n++];
		*s = (struct kvsub_one){.k = k,
					.be = be,
					.io = {.fd = -1, .fn = on_io},
					.mon_io = {.fd = -1, .fn = on_mon_io},
					.rio = {.fd = -1, .fn = on_replay_io},
					.rtimer = {.fn = on_replay_timeout}};
		zmq_msg_init(&s->payload);
		zmq_msg_init(&s->held);
		if ((rc = subscribe(k, s, i)) < 0) {
			log_error("KV events of backend %s: cannot subscribe to %s: %s", be->name,
				  be->conf->kv_events, strerror(-rc));
			goto fail;
		}
	}
	loop_timer_set(loop, &k->look, loop_now(loop) + LOOK_MS);
	return 0;
fail:
	kvsub_stop(k);
	*out = NULL;
	return rc;
}

void kvsub_stop(struct kvsub *k)
{
	if (!k)
		return;
	loop_timer_stop(k->loop, &k->look);
	for (size_t i = 0; i < k->n; i++) {
		struct kvsub_one *s = &k->subs[i];
		replay_close(s);
		zmq_msg_close(&s->held);
		if (s->io.fd >= 0)
			loop_io_del(k->loop, &s->io);
		if (s->mon_io.fd >= 0)
			loop_io_del(k->loop, &s->mon_io);
		if (s->sock) {
			zmq_socket_monitor(s->sock, NULL, 0);
			zmq_close(s->sock);
		}
		if (s->mon)
			zmq_close(s->mon);
		zmq_msg_close(&s->payload);
		kvmap_free(s->map);
	}
	if (k->ctx)
		zmq_ctx_term(k->ctx);
	free(k->subs);
	free(k->batch.ev);
	free(k->batch.hash);
	free(k->batch.tok);
	free(k);
}
