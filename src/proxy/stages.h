/*
 * stages.h - the path of one request through the proxy, as an ordered list of stages.
 *
 *   model -> route -> address -> guard -> models -> classify -> upgrade -> cache -> forward
 *   -> head done -> body -> cache serve -> tokens -> admit -> relay
 *
 * model reads the start of the body when the route depends on its "model" (routes.match.model;
 * nothing otherwise); route answers GET /healthz and /readyz itself under probes.listeners
 * (probes.h), else picks the route and pool (404 when none matches: model_not_found when
 * routes choose by model); address spends
 * the client address's request rate (routes.rate_limit.per_ip: 429), before any credential
 * costs a check; guard lets in only who the route admits (routes.auth: 401, 403) and spends
 * the tenant's and route's rates and concurrency (429); models answers GET /v1/models on an
 * api: openai route from the config (when backends list models); classify gives the request its
 * tenant, priority class, affinity key, session and streaming (heartbeat) wishes; upgrade marks a
 * WebSocket handshake its route tunnels (tunnel.h: 503 past limits.max_tunnels); cache looks a GET
 * or HEAD up in the route's response cache (routes.cache: a hit, another request's fill to wait on,
 * or a fill of its own), or marks an inference POST to be looked up once its body is read
 * (caching.h); forward writes the request head the backend will get, with the route's rewrite
 * and the route's and pool's request_headers (forward.h: 414 or 502 when the rewrite makes no
 * target; 431 when the head does not fit; none on a hit but for a stale-while-revalidate
 * refresh); head done lets the codec take
 * the head off its input (and answer "100 Continue"), then decides whether the body is read
 * before admission (limits.body_buffer_bytes, or a stage that needs it whole: pace.h) and,
 * when it is not, whether the request streams (sse.h); body has the codec read it (relay.h)
 * and then decides the streaming; cache serve looks an inference POST up
 * by its canonical body, then answers a hit (or a wait on a fill) from the store before it
 * costs tokens or a slot; tokens reserves what the request may
 * cost of its tenant's tokens_per_minute (429 before it can take a slot); admit finds a
 * backend slot or queues (dispatch.h), among the backends that serve the request's model
 * (404 when none does: policy/models.h); relay moves the bytes until the response is
 * complete.
 *
 * A stage returns RUN_AGAIN when it is done (the next one runs), RUN_STAY to wait for an
 * event (it runs again then), or RUN_GONE. Any stage may end the exchange (an answer, a cut
 * connection); the list stops there. The head stages (those before "head done") run at once,
 * while x->head still points into the worker's parse scratch and the connection is still
 * reading heads: they must not wait, but for model, which gives x->head up (NULL) while it
 * waits for body bytes and has the codec read the head anew when it runs again (peek_body);
 * the others must not wait (an asynchronous guard would copy what it needs from the
 * head and wait after "head done"). The later stages may be entered more than once. A new
 * stage is one function and one line in the list. The stages see a parsed head (struct
 * http_head) and the exchange; what needs the connection's bytes is the codec's (struct
 * exchange_codec_ops). A feature that only follows the exchange (the cache's fill, the
 * access log, the tallies, the token limits' settling) is no stage: it registers on the
 * hook lists of xhooks.h.
 */
#ifndef ACCELNET_PROXY_STAGES_H
#define ACCELNET_PROXY_STAGES_H

#include "proxy/exchange.h"

/*
 * Run <x> from the stage it is at until one waits or the exchange ends. <live> tells
 * whether <x> is still the exchange of its connection (a stage may have ended it).
 */
enum run stages_run(struct exchange *x, int (*live)(void *conn, const struct exchange *x));

#endif
