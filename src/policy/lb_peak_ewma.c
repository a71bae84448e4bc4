/*
 * lb_peak_ewma.c - latency-aware balancing: power of two choices over peak-EWMA latency
 * times load, and waiting for a fast slot rather than taking a slow one.
 *
 * The caller keeps, per backend, a peak-EWMA of its time to first byte (a sample above the
 * average replaces it at once; lower ones pull it down slowly; with no samples it decays
 * toward the backend's usual latency, a slow plain average, so a backend that was slow once
 * is tried again later; once measured it never reads 0 again). The cost of one more
 * request on a backend is that latency scaled by the load it would meet: with a cap of s
 * slots requests run side by side, so lat * (inflight + s) / s; with no cap the backend
 * queues them itself, so lat * (inflight + 1); both per unit of weight. Two eligible
 * backends are drawn at random and the cheaper wins, which spreads load without herding on
 * one "best" backend.
 *
 * An unmeasured backend (a new one, or every one at start) is probed with one request: idle,
 * it costs nothing, so it gets measured; while that probe is in flight it is costed as if it
 * were as slow as the slowest measured backend (or, with none measured, by load alone), so
 * an opening burst spreads instead of all landing on the one backend nobody has timed yet.
 *
 * With wait_for_faster, waiting can beat a slow free slot. When every fast backend is at its
 * cap, the only free slot
 * may be on one several times slower. The busy backends faster than the chosen one free
 * slots at a rate mu = sum(slots / latency); a request with w others queued ahead of it
 * gets one in about (w + 1) / mu, and then takes that backend's latency. When that is
 * sooner than the chosen backend would finish, the answer is LB_WAIT and the request stays
 * queued. The queue asks on behalf of its last waiter, so a slow backend is used exactly
 * when the queue is long enough that it is the quicker way out for someone. It is off by
 * default: it makes the queue stand at that length whenever the fast backends are short of
 * capacity, which raises everyone's wait; it pays when the slow backend is far slower
 * (a CPU fallback behind GPUs) and load is moderate. See docs/benchmarks.md.
 */
#include "policy/lb.h"

/* Expected time for <c> to serve one more request, in microseconds, were its latency <lat>. */
static double expected_at(const struct lb_candidate *c, double lat)
{
	double load = c->inflight; /* in double: inflight may be UINT32_MAX (a reported load) */
	return c->slots ? lat * (load + c->slots) / c->slots : lat * (load + 1);
}

static double expected_us(const struct lb_candidate *c)
{
	return expected_at(c, c->latency_us);
}

/* The latency an unmeasured backend with a probe in flight is taken to have: the slowest
 * measured one's among those up, or 1 (load alone decides) when none is measured. */
static uint32_t unmeasured_us(const struct lb_candidate *c, size_t n)
{
	uint32_t slowest = 0;
	for (size_t i = 0; i < n; i++)
		if ((c[i].eligible || c[i].busy) && c[i].latency_us > slowest)
			slowest = c[i].latency_us;
	return slowest ? slowest : 1;
}

static double cost(const struct lb_candidate *c, uint32_t unmeasured)
{
	if (c->latency_us)
		return expected_us(c) / c->weight;
	/* idle: free, so it gets measured; probed: assumed no faster than the slowest */
	return c->inflight ? expected_at(c, unmeasured) / c->weight : 0;
}

/* Would a request with <waiting> ahead of it finish sooner on a busy backend than on <e>? */
static int better_to_wait(const struct lb_candidate *c, size_t n, const struct lb_candidate *e,
			  unsigned waiting)
{
	double mine = expected_us(e), mu = 0, fastest = 0;
	if (!e->latency_us)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const struct lb_candidate *b = &c[i];
		if (!b->busy || !b->slots || !b->latency_us || b->latency_us >= mine)
			continue;
		mu += (double)b->slots / b->latency_us;
		if (!fastest || b->latency_us < fastest)
			fastest = b->latency_us;
	}
	return mu > 0 && (waiting + 1) / mu + fastest < mine;
}

static int ewma_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		     const struct lb_draw *d)
{
	int a, b;
	if (!lb_draw_two(c, n, d->rnd, &a, &b))
		return LB_NONE;
	uint32_t unmeasured = !c[a].latency_us || !c[b].latency_us ? unmeasured_us(c, n) : 0;
	int e = cost(&c[b], unmeasured) < cost(&c[a], unmeasured) ? b : a;
	return st->wait_for_faster && better_to_wait(c, n, &c[e], d->waiting) ? LB_WAIT : e;
}

static const struct policy_opt ewma_opts[] = {
    {NULL, "wait_for_faster", POLICY_OPT_BOOL, offsetof(struct lb_state, wait_for_faster), 0, 1, 0},
    {NULL, NULL, 0, 0, 0, 0, 0},
};

const struct lb_ops lb_peak_ewma = {
    .name = "peak-ewma",
    .pick = ewma_pick,
    .opts = ewma_opts,
    .latency = 1,
};
