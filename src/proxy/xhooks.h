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
 * exchange's block (written to *ctx_off) and its bit in an exchange's mask (*bit), and builds
 * one short array per point; the hooks of a point run in that order. From then on the lists
 * are read-only: a walk is a loop over a few function pointers, no allocation, no lock.
 *
 * Which features an exchange has: a feature marked always (the route's figures, the
 * /debug/requests record: their end runs for every exchange) is in every exchange's mask from
 * its start. Any other joins the exchanges it applies to, when its own code finds that it
 * does -- its head hook (the access log: a sampled request), or its stage by the route's or
 * pool's config (a cache, a budget, token limits, P/D, sticky sessions), or the first write
 * to its context (xhooks_join()) -- and from then on it is in the mask, however late that is
 * (a retry, a second attempt, or during a walk: a hook at some point that makes another
 * feature join has that feature's hook at the point called in the same walk, after its own,
 * the end's included). Every feature's head hook runs (the head is where it may join); the
 * later points run only the hooks of the features in the mask, so a feature a route does not
 * use costs its requests nothing past the head.
 *
 * Contexts: an exchange and the contexts of every feature are one block, from the worker's
 * free list (whole pages, mapped only while the list is cold: exchange.c). When the exchange
 * starts (xhooks_start()) this room's own (the mask, which features want the response body,
 * and the one that keeps it for the client, if any) and the always features' contexts are
 * zeroed; another feature's context is zeroed when it joins, so a block reused from the free
 * list holds the last exchange's bytes where no feature joined. A feature finds its context
 * at xhooks_ctx(x, its offset) only once in the mask: it writes through xhooks_join() and
 * reads, where it may not have joined (another feature's end reading what it did: the access
 * log asking the cache), through xhooks_peek(), which shows a feature out of the mask a zeroed
 * context, read-only. Under AddressSanitizer and in a poison build (exchange.c) the contexts
 * of the features not always in are filled with 0xa5 at the start (the always ones' are
 * zeroed, as ever), so that a read before joining shows up in the tests as nonsense, not as
 * the zeroes a fresh block would hold. exchange.h never sees a context's type. A codec may
 * keep its state for the exchange there too (h1.h).
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
	uint32_t *bit;	 /* where xhooks_setup() writes its bit in a mask (one that joins) */
	unsigned always; /* in every exchange from its start (else: once it joins) */
	void (*head)(struct exchange *x, const struct http_head *h);
	void (*req_body)(struct exchange *x, const char *body, size_t len);
	void (*resp_head)(struct exchange *x, const struct http_head *h);
	void (*resp_body)(struct exchange *x, const char *p, size_t len);
	void (*resp_done)(struct exchange *x);
	void (*end)(struct exchange *x, uint64_t now_ns); /* <now_ns>: clock_now_ns(), read once */
};

#define XHOOKS_MAX 16	    /* features, at most (a bit each in a 32-bit word) */
#define XHOOKS_CTX_MAX 1024 /* bytes of one feature's context, at most */

/* Register the <n> features of <list> (in the order their hooks run) and size the block of
 * an exchange of <exchange_size> bytes; again with the same list: no change. -E2BIG past
 * XHOOKS_MAX features or a context past XHOOKS_CTX_MAX; -EINVAL for a feature neither always
 * nor with a bit and a ctx_off to join by; -EBUSY with another list once exchanges were made
 * (xhooks_block_size()). */
int xhooks_setup(const struct xhook *const *list, size_t n, size_t exchange_size);

/* The bytes of one exchange with every feature's context behind it. */
size_t xhooks_block_size(void);

/* Exchange <x> (its own bytes zeroed) starts: this room's own and the always features'
 * contexts zeroed, those features in its mask. */
void xhooks_start(struct exchange *x);

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

extern size_t xhooks_mask_at;			/* where an exchange's mask lies in its block */
extern const char xhooks_zeros[XHOOKS_CTX_MAX]; /* a context no feature joined, as read */

/* Is feature <f> in the mask of <x>? 1 for an always feature without a bit (in from the
 * start), 0 for one that joins and is not registered. */
static inline int xhooks_in(const struct exchange *x, const struct xhook *f)
{
	const uint32_t *bit = f->bit;
	return !bit ||
	       (*(const uint32_t *)(const void *)((const char *)x + xhooks_mask_at) & *bit) != 0;
}

/* <f>'s context in <x>, joined: the first time, zeroed and <f> put in the mask. <f> must be
 * registered. */
void *xhooks_join_new(struct exchange *x, const struct xhook *f);
static inline void *xhooks_join(struct exchange *x, const struct xhook *f)
{
	return xhooks_in(x, f) ? xhooks_ctx(x, *f->ctx_off) : xhooks_join_new(x, f);
}

/* <f>'s context in <x> to read: its own once it joined (an always feature's: always), else
 * zeroes (read-only memory). */
static inline const void *xhooks_peek(const struct exchange *x, const struct xhook *f)
{
	return xhooks_in(x, f) ? xhooks_ctx(x, *f->ctx_off) : (const void *)xhooks_zeros;
}

/* Feature <f> (registered) wants the response body bytes of <x> from now on: its
 * resp_body hook runs for them (it joins, if it had not). */
void xhooks_want_body(struct exchange *x, const struct xhook *f);
/* Does any feature want the response body of <x> (a body nobody reads may bypass them)? */
int xhooks_body_wanted(const struct exchange *x);

/*
 * A feature that keeps the response body as it comes (the cache's fill: its object) may offer
 * it as the client's source, so that the backend is read at its own pace, not the client's:
 * the codec that takes the offer lets the bytes the feature took leave its buffer at once
 * and writes the client's answer from what the feature keeps (framed as the response head
 * it relayed says). Should the feature stop keeping before the body ends (too large), the
 * codec writes what was kept, then goes on with the bytes still in its buffer, from where the
 * feature stopped.
 */
struct http_chunked;
struct iovec;
struct xkeep {
	/* Raw response bytes (of those its resp_body hook was given) it holds now, since it was
	 * last asked: they may leave the codec's buffer. */
	size_t (*taken)(struct exchange *x);
	/* Body bytes it keeps (the payload: a chunked body's framing dropped); *state 1 while
	 * more may come, 0 once it keeps the whole body, -1 once it stopped keeping. */
	uint64_t (*kept)(const struct exchange *x, int *state);
	/* Its bytes [from, to) (within kept()) as up to <max> iovecs into <iov>: how many. */
	int (*iov)(const struct exchange *x, uint64_t from, uint64_t to, struct iovec *iov,
		   int max);
	/* After a stop: the chunked scanner's state where the bytes left in the codec's buffer
	 * resume (a chunked body's; for another framing the bytes are payload as they are). */
	const struct http_chunked *(*resume)(const struct exchange *x);
};

/* <k> (of a feature that keeps the response body of <x>) is offered as the client's source;
 * the codec takes the offer or not (xhooks_keeper()). Once per exchange, at its response
 * head. */
void xhooks_keep_body(struct exchange *x, const struct xkeep *k);
/* The offer, or NULL. */
const struct xkeep *xhooks_keeper(const struct exchange *x);

/* The walks (the points above): the head's every feature's, the others' the mask's. */
void xhooks_head(struct exchange *x, const struct http_head *h);
void xhooks_req_body(struct exchange *x, const char *body, size_t len);
void xhooks_resp_head(struct exchange *x, const struct http_head *h);
void xhooks_resp_body(struct exchange *x, const char *p, size_t len);
void xhooks_resp_done(struct exchange *x);
void xhooks_end(struct exchange *x, uint64_t now_ns);

#endif
