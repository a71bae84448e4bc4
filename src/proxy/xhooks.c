/*
 * xhooks.c - the hook lists and the context layout of an exchange's block (see xhooks.h).
 *
 * One array of function pointers per point, filled once by xhooks_setup() before the workers
 * start and only read afterwards, so the walks need no lock. Behind the exchange comes this
 * room's own: a bit per feature (its index in the list) that wants the response body, and
 * the feature's offer to keep the body for the client (struct xkeep), then the contexts, each on a
 * 16-byte boundary (malloc's), in the order of the list.
 */
#include "proxy/xhooks.h"

#include <errno.h>

#define ALIGN 16

static struct {
	const struct xhook *const *list;
	size_t n, block;
	size_t body_off; /* struct room: which features want the response body, who keeps it */
	void (*head[XHOOKS_MAX])(struct exchange *, const struct http_head *);
	void (*req_body[XHOOKS_MAX])(struct exchange *, const char *, size_t);
	void (*resp_head[XHOOKS_MAX])(struct exchange *, const struct http_head *);
	void (*resp_done[XHOOKS_MAX])(struct exchange *);
	void (*end[XHOOKS_MAX])(struct exchange *, uint64_t);
	unsigned nhead, nreq_body, nresp_head, nresp_done, nend;
} hooks;

struct room {
	uint32_t body_bits;
	const struct xkeep *keep;
};

static size_t align_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

int xhooks_setup(const struct xhook *const *list, size_t n, size_t exchange_size)
{
	if (n > XHOOKS_MAX)
		return -E2BIG;
	if (hooks.list == list && hooks.n == n)
		return 0;
	if (hooks.list)
		return -EBUSY;
	hooks.body_off = align_up(exchange_size);
	size_t off = align_up(hooks.body_off + sizeof(struct room));
	hooks.list = list;
	hooks.n = n;
	for (size_t i = 0; i < n; i++) {
		const struct xhook *f = list[i];
		if (f->ctx_size) {
			*f->ctx_off = off;
			off += align_up(f->ctx_size);
		}
		if (f->head)
			hooks.head[hooks.nhead++] = f->head;
		if (f->req_body)
			hooks.req_body[hooks.nreq_body++] = f->req_body;
		if (f->resp_head)
			hooks.resp_head[hooks.nresp_head++] = f->resp_head;
		if (f->resp_done)
			hooks.resp_done[hooks.nresp_done++] = f->resp_done;
		if (f->end)
			hooks.end[hooks.nend++] = f->end;
	}
	hooks.block = off;
	return 0;
}

size_t xhooks_block_size(void)
{
	return hooks.block;
}

/* Several features at a point: the walk, kept out of line so that the one-feature case of
 * xhooks_head() and xhooks_resp_head() saves no registers. */
__attribute__((noinline)) static void
walk_heads(void (*const *fn)(struct exchange *, const struct http_head *), unsigned n,
	   struct exchange *x, const struct http_head *h)
{
	for (unsigned i = 0; i < n; i++)
		fn[i](x, h);
}

/* One feature at a point (the head: the access log; the response head: the tally) is called
 * straight, a tail call: the loop's saved registers cost a request some 40 instructions. */
void xhooks_head(struct exchange *x, const struct http_head *h)
{
	if (hooks.nhead == 1)
		hooks.head[0](x, h);
	else
		walk_heads(hooks.head, hooks.nhead, x, h);
}

void xhooks_req_body(struct exchange *x, const char *body, size_t len)
{
	for (unsigned i = 0; i < hooks.nreq_body; i++)
		hooks.req_body[i](x, body, len);
}

void xhooks_resp_head(struct exchange *x, const struct http_head *h)
{
	if (hooks.nresp_head == 1)
		hooks.resp_head[0](x, h);
	else
		walk_heads(hooks.resp_head, hooks.nresp_head, x, h);
}

static struct room *room_of(const struct exchange *x)
{
	return xhooks_ctx(x, hooks.body_off);
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
		if (hooks.list[i] == f && f->resp_body)
			*body_bits(x) |= 1u << i;
}

int xhooks_body_wanted(const struct exchange *x)
{
	return *body_bits(x) != 0;
}

void xhooks_resp_body(struct exchange *x, const char *p, size_t len)
{
	for (uint32_t m = *body_bits(x), i = 0; m; m >>= 1, i++)
		if (m & 1)
			hooks.list[i]->resp_body(x, p, len);
}

void xhooks_resp_done(struct exchange *x)
{
	for (unsigned i = 0; i < hooks.nresp_done; i++)
		hooks.resp_done[i](x);
}

void xhooks_end(struct exchange *x, uint64_t now_ns)
{
	for (unsigned i = 0; i < hooks.nend; i++)
		hooks.end[i](x, now_ns);
}
