/*
 * lb_llm.c - routing LLM requests on the expected time to their first token.
 *
 * For each backend that is up, the expected time until this request's first token there is
 *
 *     wait + base + per_block x (prompt blocks - blocks of it already in its prefix cache)
 *
 * wait: nothing while it has a free slot; at its cap, one slot's turn (the mean expected
 * service of what holds its slots / slots) for each request beyond the free ones, counting
 * the requests others sent it (reported load) and the requests already queued for it (those
 * whose picks answered LB_WAIT for it: the caller counts them, and a grant serves them
 * first, so they go before this one). A backend without max_concurrency shares
 * itself among all it serves, as if LLM_UNCAPPED_SLOTS ran side by side: each request in
 * flight adds its share of a turn, so load spreads even when no slot is ever full. base and
 * per_block are fitted online per backend from measured time to first byte against the blocks it
 * had to compute (policy/ttft_fit.h); the blocks held come from the caller's per-backend prefix
 * index (policy/prefix_index.h).
 *
 * The request goes to the backend where it costs the pool least: its expected time there,
 * plus, while requests queue, what its prefill takes from them. A block computed holds a
 * slot of that backend, and delays whoever waits for such a slot: each of the W requests
 * queued for that backend (its waiting count) about 1/slots of it, and each of the H queued
 * for no backend in particular (the queue's length less every backend's waiting count)
 * about 1/S of it (S: the pool's slots), so a missed block there costs per_block x (1 +
 * W / slots + H / S). Those queued for other backends wait for other slots: a prefill here
 * takes nothing from them. (Counting the whole queue at 1/S, as this did first, made a
 * free slow backend look dear to every request while the queue was long, so the requests
 * waited for their busy homes and the free slots stood idle: on bench/fleetmodel.py's
 * non-streamed-flat shape at 2x, 73 requests a second of 87 within the SLO.) With no queue
 * this is the expected time alone; under load it keeps a request on the backend that holds
 * its prefix unless the wait there outweighs the work its recomputation would take from
 * everyone else (without it, when queues grow, requests that leave a busy home re-read
 * their whole history elsewhere, pushing other conversations out of that cache and the
 * queue longer still: the affinity a fleet whose caches hold conversation histories
 * depends on collapses past the load where queues form). Ties go to the least loaded, then
 * by the draw.
 *
 * Affinity under overload: when the best backend is at its cap but still beats every free
 * one (recomputing the prefix elsewhere costs more than waiting for a slot here), the answer
 * is LB_WAIT and the request queues for it, until it has waited max_wait_ms: then it takes
 * the best free slot, so nobody starves. The wait counts from the first free slot it passed
 * up (d->waited_ms), not from when it joined the line: a line where no slot is free is no
 * choice it made, and when the line itself is long, counting it sent every request to the
 * first slot that freed, so the caches lost the conversations they held, every prefill grew
 * and the line with it (a collapse, bench/fleets.py's independent shape at 1.37x). The queue, when
 * a slot frees, first looks (among the first waiters) for one whose cached prefix is on a backend
 * with a free slot (home_only), so the slot goes to the request that gains most from it, then
 * serves the line in order.
 *
 * A new prompt (no backend holds any block of it) gains nothing from any cache, so the
 * fits' small differences should not decide it, and neither should anything one instance
 * alone knows: among the free backends whose expected time is within LLM_NEW_SLACK_PCT of
 * the best free one's, and whose share of their slots taken is within half of the least
 * loaded one's, it goes to the one whose stable id (a hash of its address) hashed with the
 * prompt's first block weighs most (rendezvous, or highest-random-weight, hashing). Every
 * instance of a fleet, every restart of one, and every instance while the Redis they share
 * is away so sends the same new prompt to the same backend while loads are even, where a
 * draw or a count of what each had placed itself sent it to a different backend at each
 * (scenario 9 through three instances with Redis stopped: each index learnt alone, hits
 * fell). Different prompts spread evenly over the pool (one backend whose fit learned first
 * would otherwise win every new prompt by a hair and hold every cache), while a clearly
 * faster backend still wins them, and a much busier one never does.
 *
 * Without a prompt (blocks 0: none, a chunked body, a body over hash.body_max_bytes before
 * its prompt) every backend misses alike and nothing is worth waiting for: the least
 * expected wait among the free slots, work-conserving, like least-connections with the
 * backends' measured speeds. Weights are not read: the fitted costs say what a weight would.
 *
 * Explaining a decision (llm_explain, for /debug/requests, metrics and llm.explain's
 * header) is a separate reading of the pick's answer, done by the caller only when it
 * records decisions: the pick itself does no bookkeeping for it.
 */
#include "policy/lb.h"

#include <xxhash.h>

#define LLM_UNCAPPED_SLOTS 8
#define LLM_NEW_SLACK_PCT 10
/* a new prompt: a backend with more of its slots taken than the least loaded, by this share,
 * is too busy for the hash */
#define LLM_NEW_LOAD_SLACK_PCT 50

/* Requests side by side on <c>. */
static unsigned slots_of(const struct lb_candidate *c)
{
	return c->slots ? c->slots : LLM_UNCAPPED_SLOTS;
}

/* Blocks of this request <c> must compute. */
static uint32_t missed(const struct lb_candidate *c, const struct lb_draw *d)
{
	return d->blocks > c->hit_blocks ? d->blocks - c->hit_blocks : 0;
}

/* Expected microseconds until the first token of this request on <c>. */
static double first_token_us(const struct lb_candidate *c, const struct lb_draw *d)
{
	unsigned slots = slots_of(c);
	double wait = 0;
	if (!c->slots) /* it shares itself among all it serves: each one slows the next */
		wait = (double)c->inflight * c->service_us / slots;
	else if (c->inflight >= slots) /* every slot taken: one turn per request beyond them,
					* and for each queued for it already */
		wait = (double)(c->inflight - slots + 1 + c->waiting) * c->service_us / slots;
	return wait + c->base_us + (double)c->block_us * missed(c, d);
}

/* What a missed block's work costs the requests queued for no backend in particular: H / S
 * (the essay). */
static double queue_share(const struct lb_candidate *c, size_t n, const struct lb_draw *d)
{
	if (!d->queued)
		return 0;
	double slots = 0;
	unsigned homed = 0;
	for (size_t i = 0; i < n; i++) {
		homed += c[i].waiting;
		if (c[i].eligible || c[i].busy)
			slots += slots_of(&c[i]);
	}
	return slots && d->queued > homed ? (d->queued - homed) / slots : 0;
}

/* What sending this request to <c> costs the pool: its expected time plus its prefill's
 * share of the wait of those queued for <c> and of the others (<share>: queue_share()). */
static double cost_us(const struct lb_candidate *c, const struct lb_draw *d, double share)
{
	double mine = d->queued ? (double)c->waiting / slots_of(c) : 0;
	return first_token_us(c, d) + (share + mine) * c->block_us * missed(c, d);
}

/* Is a better than b, costs equal or not: the cheaper, then the less loaded. */
static int better(const struct lb_candidate *a, double ca, const struct lb_candidate *b, double cb)
{
	if (ca != cb)
		return ca < cb;
	return lb_less_loaded(a, b);
}

/* <c>'s rendezvous weight for the prompt named <key>: the same at every instance. */
static uint64_t rendezvous_weight(const struct lb_candidate *c, uint64_t key)
{
	return XXH3_64bits_withSeed(&c->id, sizeof(c->id), key);
}

/*
 * A new prompt's backend (the essay): among the free ones about as quick as the best free
 * one (<free_us>) and about as loaded as the least loaded of those, the one whose
 * rendezvous weight for the prompt's first block is highest; <*among> says how many were
 * about as quick and loaded. <free_best> itself qualifies, so the answer is never LB_NONE.
 */
static int rendezvous(const struct lb_candidate *c, size_t n, const struct lb_draw *d, double share,
		      double free_us, int free_best, size_t *among)
{
	double limit = free_us * (100 + LLM_NEW_SLACK_PCT) / 100, least = -1;
	for (size_t i = 0; i < n; i++)
		if (c[i].eligible && cost_us(&c[i], d, share) <= limit) {
			double used = (double)c[i].inflight / slots_of(&c[i]);
			least = least < 0 || used < least ? used : least;
		}
	int pick = free_best;
	uint64_t top = 0;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!c[i].eligible || cost_us(&c[i], d, share) > limit ||
		    (double)c[i].inflight / slots_of(&c[i]) >
			least + LLM_NEW_LOAD_SLACK_PCT / 100.0)
			continue;
		uint64_t w = rendezvous_weight(&c[i], d->key);
		if (!k++ || w > top || (w == top && c[i].id < c[pick].id)) {
			pick = (int)i;
			top = w;
		}
	}
	*among = k;
	return pick;
}

static int llm_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		    const struct lb_draw *d)
{
	int best = LB_NONE, free_best = LB_NONE, any_hit = 0;
	double best_us = 0, free_us = 0, share = queue_share(c, n, d);
	size_t start = n ? (size_t)(d->rnd % n) : 0; /* ties: whoever the draw meets first */
	for (size_t k = 0; k < n; k++) {
		size_t i = (start + k) % n;
		if (!c[i].eligible && !c[i].busy)
			continue;
		any_hit |= c[i].hit_blocks > 0;
		double us = cost_us(&c[i], d, share);
		if (best == LB_NONE || better(&c[i], us, &c[best], best_us)) {
			best = (int)i;
			best_us = us;
		}
		if (c[i].eligible &&
		    (free_best == LB_NONE || better(&c[i], us, &c[free_best], free_us))) {
			free_best = (int)i;
			free_us = us;
		}
	}
	if (d->home_only) /* a freed slot looks for the request whose prefix it holds */
		return best >= 0 && best == free_best && c[best].hit_blocks ? best : LB_WAIT;
	if (free_best == LB_NONE)
		return LB_NONE;
	if (best != free_best && d->blocks && d->waited_ms < st->max_wait_ms) {
		if (d->wait_for) /* the caller counts it queued for that one */
			*d->wait_for = best;
		return LB_WAIT; /* a busy backend holds it and will be quicker: wait for it */
	}
	size_t among;
	if (d->blocks && !any_hit) /* a new prompt: the rendezvous among the about as quick */
		free_best = rendezvous(c, n, d, share, free_us, free_best, &among);
	return free_best;
}

/* <us> in whole microseconds, saturated. */
static uint32_t us32(double us)
{
	return us <= 0 ? 0 : us >= UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

/* One candidate's estimate, <us> its expected time. */
static struct lb_estimate estimate(const struct lb_candidate *e, size_t i, double us,
				   const struct lb_draw *d)
{
	double prefill = e->base_us + (double)e->block_us * missed(e, d);
	return (struct lb_estimate){
	    .backend = (uint16_t)i,
	    .busy = !e->eligible,
	    .hit_blocks = e->hit_blocks,
	    .wait_us = us32(us - prefill),
	    .base_us = e->base_us,
	    .block_us = e->block_us,
	    .expect_us = us32(us),
	    .inflight = e->inflight,
	    .slots = e->slots,
	};
}

/*
 * The decision <r> that llm_pick() made on these arguments, read back (lb_ops.explain):
 * each candidate ranked by the same cost_us(), the pick first and then the cheapest others
 * (kept sorted as they come: one pass), and the reason read from the outcome
 * against those estimates. It decides nothing, so the pick's cost is the same whether or not
 * anyone asks.
 */
static void llm_explain(const struct lb_state *st, const struct lb_candidate *c, size_t n,
			const struct lb_draw *d, int r, struct lb_explain *out)
{
	int ok = r >= 0 && (size_t)r < n;
	double share = queue_share(c, n, d);
	double ur = ok ? cost_us(&c[r], d, share) : 0, best_us = 0, free_us = 0;
	int best = LB_NONE, free_best = LB_NONE, any_hit = 0, tie = 0, tie_draw = 0;
	size_t seen = 0, ntop = 0, cap = ok ? LB_EXPLAIN_MAX - 1 : LB_EXPLAIN_MAX, among = 0;
	size_t top[LB_EXPLAIN_MAX];
	double top_us[LB_EXPLAIN_MAX];
	for (size_t i = 0; i < n; i++) {
		if (!c[i].eligible && !c[i].busy)
			continue;
		seen++;
		any_hit |= c[i].hit_blocks > 0;
		double us = (int)i == r ? ur : cost_us(&c[i], d, share);
		if (best == LB_NONE || us < best_us) {
			best = (int)i;
			best_us = us;
		}
		if (c[i].eligible && (free_best == LB_NONE || us < free_us)) {
			free_best = (int)i;
			free_us = us;
		}
		if ((int)i == r)
			continue;
		if (ok && c[i].eligible && us == ur) {
			tie = 1;
			tie_draw |= !lb_less_loaded(&c[r], &c[i]);
		}
		if (ntop == cap && us >= top_us[cap - 1])
			continue;
		size_t k = ntop < cap ? ntop++ : cap - 1;
		for (; k > 0 && top_us[k - 1] > us; k--) {
			top[k] = top[k - 1];
			top_us[k] = top_us[k - 1];
		}
		top[k] = i;
		top_us[k] = us;
	}
	uint8_t why = LB_WHY_OTHER;
	if (!ok && r != LB_WAIT)
		why = LB_WHY_NONE;
	else if (d->home_only)
		why = ok ? LB_WHY_HOME : LB_WHY_WAIT;
	else if (!ok)
		why = LB_WHY_WAIT;
	else if (!d->blocks)
		why = LB_WHY_NO_PROMPT;
	else if (best_us < ur && c[best].busy && d->waited_ms >= st->max_wait_ms)
		why = LB_WHY_MAX_WAIT;
	else if (!any_hit && free_best != LB_NONE &&
		 rendezvous(c, n, d, share, free_us, free_best, &among) == r &&
		 (among > 1 || ur != free_us)) /* (the quickest free was much busier) */
		why = LB_WHY_RENDEZVOUS;
	else if (free_best != LB_NONE && ur == free_us)
		why = !tie ? LB_WHY_LEAST : tie_draw ? LB_WHY_TIE_DRAW : LB_WHY_TIE_LOAD;
	*out = (struct lb_explain){.where = out->where,
				   .result = r,
				   .why = why,
				   .waited = out->waited || r == LB_WAIT,
				   .nseen = (uint16_t)seen,
				   .blocks = d->blocks,
				   .waited_ms = out->waited_ms};
	/* (ranked by cost; each shows its expected time, which is what is measured after) */
	if (ok)
		out->cand[out->ncand++] = estimate(&c[r], (size_t)r, first_token_us(&c[r], d), d);
	for (size_t k = 0; k < ntop; k++)
		out->cand[out->ncand++] =
		    estimate(&c[top[k]], top[k], first_token_us(&c[top[k]], d), d);
}

/* llm.block_bytes, llm.cache_blocks, llm.max_wait_ms, llm.explain: see docs/config.md. */
static const struct policy_opt llm_opts[] = {
    {"llm", "block_bytes", POLICY_OPT_UINT, offsetof(struct lb_state, block_bytes), 16, 4096, 256},
    {"llm", "cache_blocks", POLICY_OPT_UINT, offsetof(struct lb_state, cache_blocks), 16, 16777216,
     16384},
    {"llm", "max_wait_ms", POLICY_OPT_UINT, offsetof(struct lb_state, max_wait_ms), 0, 600000,
     2000},
    {"llm", "explain", POLICY_OPT_BOOL, offsetof(struct lb_state, explain), 0, 1, 0},
    {NULL, NULL, 0, 0, 0, 0, 0},
};

const struct lb_ops lb_llm = {
    .name = "llm",
    .pick = llm_pick,
    .explain = llm_explain,
    .opts = llm_opts,
    .keyed = 1,
    .prompt = 1,
    .blocks = 1,
};
