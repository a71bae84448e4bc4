/*
 * xhooks.h - the features' hooks on an exchange's life, and their contexts.
 *
 * A feature that follows exchanges without deciding their path -- the response cache's
 * fill, the access log, the route's and tenant's tallies, the token limits' settling,
 * /debug/requests -- is one const struct xhook: the hooks it wants called, and the size of
 * the context it keeps per exchange. The exchange and its codec never call a feature by
 * name: they walk a list. The points, in the order an exchange meets them:
 *
 *   head       the request head is parsed (exchange_new(), before any stage)
 *   req_body   the request body was read before admission (the strict view taken)
 *   resp_head  the backend's response head is in (x->resp framed, x->status set)
 *   resp_body  response body bytes came from the backend, before the client can see them:
 *              only to the features that asked for this exchange's (xhooks_want_body()), so
 *              a body no feature reads costs one test per read
 *   resp_done  the backend's response is in whole (its slot may go back)
 *   end        the exchange ends, relayed, answered by the proxy or cut (exchange_free())
 *
 * Registration happens once, at start-up, before any worker runs: xhooks_setup() takes the
 * features in order (proxy.c holds the list), gives each its context's offset in an
 * exchange's block (written to *ctx_off) and builds one short array per point; the hooks of
 * a point run in that order. From then on the lists are read-only: a walk is a loop over a
 * few function pointers, no allocation, no lock.
 *
 * Contexts: an exchange and the contexts of every feature are one block, from the worker's
 * free list (whole pages, mapped only while the list is cold: exchange.c), zeroed when the
 * exchange starts: first this room's own word (which features want the response body), then
 * each feature's. A feature finds its context at xhooks_ctx(x, its offset); exchange.h never
 * sees its type. A codec may keep its state for the exchange there too (h1.h).
 */
#ifndef ACCELNET_PROXY_XHOOKS_H
#define ACCELNET_PROXY_XHOOKS_H

#include <stddef.h>
#include <stdint.h>

struct exchange;
struct http_head;

struct xhook {
	const char *name;
	size_t ctx_size; /* bytes of context per exchange (0: none) */
	size_t *ctx_off; /* where xhooks_setup() writes its offset in the block (with ctx_size) */
	void (*head)(struct exchange *x, const struct http_head *h);
	void (*req_body)(struct exchange *x, const char *body, size_t len);
	void (*resp_head)(struct exchange *x, const struct http_head *h);
	void (*resp_body)(struct exchange *x, const char *p, size_t len);
	void (*resp_done)(struct exchange *x);
	void (*end)(struct exchange *x, uint64_t now_ns); /* <now_ns>: clock_now_ns(), read once */
};

#define XHOOKS_MAX 16 /* features, at most (a bit each in a 32-bit word) */

/* Register the <n> features of <list> (in the order their hooks run) and size the block of
 * an exchange of <exchange_size> bytes; again with the same list: no change. -E2BIG past
 * XHOOKS_MAX; -EBUSY with another list once exchanges were made (xhooks_block_size()). */
int xhooks_setup(const struct xhook *const *list, size_t n, size_t exchange_size);

/* The bytes of one exchange with every feature's context behind it. */
size_t xhooks_block_size(void);

/* The context at <off> of exchange <x>. */
static inline void *xhooks_ctx(const struct exchange *x, size_t off)
{
	return (char *)x + off;
}
/* ... and back: the exchange whose context at <off> is <ctx>. */
static inline struct exchange *xhooks_exchange_of(void *ctx, size_t off)
{
	return (struct exchange *)(void *)((char *)ctx - off);
}

/* Feature <f> (registered) wants the response body bytes of <x> from now on: its
 * resp_body hook runs for them. */
void xhooks_want_body(struct exchange *x, const struct xhook *f);
/* Does any feature want the response body of <x> (a body nobody reads may bypass them)? */
int xhooks_body_wanted(const struct exchange *x);

/* The walks (the points above). */
void xhooks_head(struct exchange *x, const struct http_head *h);
void xhooks_req_body(struct exchange *x, const char *body, size_t len);
void xhooks_resp_head(struct exchange *x, const struct http_head *h);
void xhooks_resp_body(struct exchange *x, const char *p, size_t len);
void xhooks_resp_done(struct exchange *x);
void xhooks_end(struct exchange *x, uint64_t now_ns);

#endif
