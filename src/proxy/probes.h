/*
 * probes.h - the proxy's own liveness and readiness answers, GET /healthz and GET /readyz:
 * on the admin endpoint (control/admin.c) always, and on the data listeners with
 * probes.listeners (the stage "route" asks probes_answer() first). Never forwarded.
 *
 * Alive: the process answers. Ready: it is not draining to exit, every pool has at least
 * probes.min_up backends usable (present, enabled, up, not ejected: backend_usable()), and no
 * model's tokenizer is failing (runtime/tokhealth.h: most of the prompts it was asked to
 * encode in the last 10 s failed). A model whose chats are keyed on text (degraded: no chat
 * format) is ready, and said so beside "ready" on the admin endpoint.
 */
#ifndef ACCELNET_PROXY_PROBES_H
#define ACCELNET_PROXY_PROBES_H

#include "proxy/exchange.h"
#include "runtime/pool.h"

#include <stddef.h>

/*
 * Why <rt> is not ready, as one line into out[0..outlen) ("" when it is ready): draining, or
 * the pools with fewer than <min_up> usable backends and the models whose tokenizer is
 * failing, named when <named> (else counted: their names are for those who may read
 * /status). Walks every backend: off the request path, or on a probe's.
 */
void probes_ready_why(const struct runtime *rt, unsigned min_up, int named, char *out,
		      size_t outlen);

/* The models whose tokenizer is degraded (their chats keyed on text), a line each ending in
 * '\n', named when <named> (else one line counting them), into out[0..outlen); "": none. */
void probes_degraded(const struct runtime *rt, int named, char *out, size_t outlen);

/* A data listener's GET /healthz or /readyz under probes.listeners: answered (200, or 503 with
 * why, as JSON), or RUN_AGAIN for every other request. */
enum run probes_answer(struct exchange *x);

#endif
