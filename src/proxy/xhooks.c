/*
 * xhooks.c - the hook lists and the context layout of an exchange's block (see xhooks.h).
 *
 * One array of function pointers per point, filled once by xhooks_setup() before the workers
 * start and only read afterwards, so the walks need no lock: the head's in the order of the
 * list, the later points' indexed by the feature's bit, with a mask per point of the features
 * that have a hook there. A walk past the head takes the exchange's mask and the point's
 * together and calls the lowest (first in the list) bit's hook not yet called at this point,
 * reading the mask anew after each hook: one that makes another feature join (or ask for the
 * body) has that feature's hook called in the same walk, at the end too, so nothing it takes
 * there is left without its end. Behind the exchange
 * comes this room's own: the mask, a bit per feature (its index in the list) that wants the
 * response body, and the feature's offer to keep the body for the client (struct xkeep), then
 * the contexts, each on a 16-byte boundary (malloc's): the always features' first, so that
 * xhooks_start() zeroes one run of bytes, then the others, each in the order of the list.
 */
#include "proxy/xhooks.h"
#include "core/check.h"
#include "core/sanitize.h"

#include <errno.h>
#include <string.h>

#define ALIGN 16

enum { P_REQ_BODY, P_RESP_HEAD, P_RESP_DONE, P_END, POINTS };

static struct {
	const struct xhook *const *list;
	size_t n, block;
	size_t start_end; /* the room and the always features' contexts end here */
	uint32_t always;  /* their bits */
	void (*head[XHOOKS_MAX])(struct exchange *, const struct http_head *);
	unsigned nhead;
	uint32_t at[POINTS]; /* the features with a hook at each point past the head */
	void (*req_body[XHOOKS_MAX])(struct exchange *, const char *, size_t);
	void (*resp_head[XHOOKS_MAX])(struct exchange *, const struct http_head *);
	void (*resp_done[XHOOKS_MAX])(struct exchange *);
	void (*end[XHOOKS_MAX])(struct exchange *, uint64_t);
} hooks;

size_t xhooks_mask_at;
const char xhooks_zeros[XHOOKS_CTX_MAX];

struct room {
	uint32_t in; /* the features in the exchange (first: xhooks_mask_at) */
	uint32_t body_bits;
	const struct xkeep *keep;
};

static size_t align_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

/* The contexts of the features that are always (<always> 1) or not in, from <off>. */
static size_t lay_out(const struct xhook *const *list, size_t n, unsigned always, size_t off)
{
	for (size_t i = 0; i < n; i++) {
		const struct xhook *f = list[i];
		if (!f->always != !always || !f->ctx_size)
			continue;
		*f->ctx_off = off;
		off += align_up(f->ctx_size);
	}
	return off;
}

int xhooks_setup(const struct xhook *const *list, size_t n, size_t exchange_size)
{
	if (n > XHOOKS_MAX)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		if (list[i]->ctx_size > XHOOKS_CTX_MAX)
			return -E2BIG;
		if (!list[i]->always && (!list[i]->bit || !list[i]->ctx_off))
			return -EINVAL;
	}
	if (hooks.list == list && hooks.n == n)
		return 0;
	if (hooks.list)
		return -EBUSY;
	size_t room = align_up(exchange_size);
	hooks.start_end = lay_out(list, n, 1, align_up(room + sizeof(struct room)));
	hooks.block = lay_out(list, n, 0, hooks.start_end);
	xhooks_mask_at = room + offsetof(struct room, in);
	hooks.list = list;
	hooks.n = n;
	for (size_t i = 0; i < n; i++) {
		const struct xhook *f = list[i];
		uint32_t bit = 1u << i;
		if (f->bit)
			*f->bit = bit;
		if (f->always)
			hooks.always |= bit;
		if (f->head)
			hooks.head[hooks.nhead++] = f->head;
		if ((hooks.req_body[i] = f->req_body))
			hooks.at[P_REQ_BODY] |= bit;
		if ((hooks.resp_head[i] = f->resp_head))
			hooks.at[P_RESP_HEAD] |= bit;
		if ((hooks.resp_done[i] = f->resp_done))
			hooks.at[P_RESP_DONE] |= bit;
		if ((hooks.end[i] = f->end))
			hooks.at[P_END] |= bit;
	}
	return 0;
}

size_t xhooks_block_size(void)
{
	return hooks.block;
}

static struct room *room_of(const struct exchange *x)
{
	return xhooks_ctx(x, xhooks_mask_at - offsetof(struct room, in));
}

void xhooks_start(struct exchange *x)
{
	struct room *r = room_of(x);
	memset(r, 0, hooks.start_end - (size_t)((char *)r - (char *)x));
	r->in = hooks.always;
#if defined(ACCELNET_EXCHANGE_POISON) || ACCELNET_ASAN
	/* what a block reused from the free list would hold: bytes no feature may read before
	 * it joins, which would show up in the tests as nonsense rather than as zeroes */
	memset((char *)x + hooks.start_end, 0xa5, hooks.block - hooks.start_end);
#endif
}

void *xhooks_join_new(struct exchange *x, const struct xhook *f)
{
	ASSERT(*f->bit);
	void *c = xhooks_ctx(x, *f->ctx_off);
	room_of(x)->in |= *f->bit;
	memset(c, 0, f->ctx_size);
	return c;
}

/* The features of <x> with a hook at point <p>. */
static uint32_t due(const struct exchange *x, unsigned p)
{
	return room_of(x)->in & hooks.at[p];
}

static unsigned first(uint32_t m)
{
	return (unsigned)__builtin_ctz(m);
}

/* The head's walk, kept out of line so that the one-feature case of xhooks_head() saves no
 * registers: every feature's head hook runs, in the mask or not (the head is where one may
 * join), so nothing is read anew here. */
__attribute__((noinline)) static void
walk_heads(void (*const *fn)(struct exchange *, const struct http_head *), unsigned n,
	   struct exchange *x, const struct http_head *h)
{
	for (unsigned i = 0; i < n; i++)
		fn[i](x, h);
}

/* The response head's hooks of the features of <x> not in <done> (the mask read anew after
 * each). */
__attribute__((noinline)) static void walk_resp_heads(uint32_t done, struct exchange *x,
						      const struct http_head *h)
{
	for (uint32_t m; (m = due(x, P_RESP_HEAD) & ~done); done |= m & -m)
		hooks.resp_head[first(m)](x, h);
}

/* One head hook (the access log's) is called straight, a tail call: the loop's saved
 * registers cost a request some 40 instructions. */
void xhooks_head(struct exchange *x, const struct http_head *h)
{
	if (hooks.nhead == 1)
		hooks.head[0](x, h);
	else
		walk_heads(hooks.head, hooks.nhead, x, h);
}

void xhooks_req_body(struct exchange *x, const char *body, size_t len)
{
	for (uint32_t m, done = 0; (m = due(x, P_REQ_BODY) & ~done); done |= m & -m)
		hooks.req_body[first(m)](x, body, len);
}

/* One feature at the response head (the tallies', on a plain route) is called straight, the
 * loop left out of line; the walk then runs only if that hook made another feature join. */
void xhooks_resp_head(struct exchange *x, const struct http_head *h)
{
	uint32_t m = due(x, P_RESP_HEAD);
	if (m && !(m & (m - 1))) {
		hooks.resp_head[first(m)](x, h);
		if (!(due(x, P_RESP_HEAD) & ~m))
			return;
	} else {
		m = 0;
	}
	walk_resp_heads(m, x, h);
}

static uint32_t *body_bits(const struct exchange *x)
{
	return &room_of(x)->body_bits;
}

void xhooks_keep_body(struct exchange *x, const struct xkeep *k)
{
	room_of(x)->keep = k;
}

const struct xkeep *xhooks_keeper(const struct exchange *x)
{
	return room_of(x)->keep;
}

void xhooks_want_body(struct exchange *x, const struct xhook *f)
{
	for (size_t i = 0; i < hooks.n; i++)
		if (hooks.list[i] == f && f->resp_body) {
			if (!f->always)
				(void)xhooks_join(x, f);
			*body_bits(x) |= 1u << i;
		}
}

int xhooks_body_wanted(const struct exchange *x)
{
	return *body_bits(x) != 0;
}

void xhooks_resp_body(struct exchange *x, const char *p, size_t len)
{
	for (uint32_t m, done = 0; (m = *body_bits(x) & ~done); done |= m & -m)
		hooks.list[first(m)]->resp_body(x, p, len);
}

void xhooks_resp_done(struct exchange *x)
{
	for (uint32_t m, done = 0; (m = due(x, P_RESP_DONE) & ~done); done |= m & -m)
		hooks.resp_done[first(m)](x);
}

void xhooks_end(struct exchange *x, uint64_t now_ns)
{
	for (uint32_t m, done = 0; (m = due(x, P_END) & ~done); done |= m & -m)
		hooks.end[first(m)](x, now_ns);
}
