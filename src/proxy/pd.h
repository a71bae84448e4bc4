/*
 * pd.h - prefill/decode disaggregation (pools[].disaggregation): a request to a decode pool is
 * first sent to a backend of its prefill pool, then to a decode backend, in one of two
 * protocols.
 *
 *   vllm    (NixlConnector, as vLLM's own disaggregated proxy does it) the prefill backend gets
 *           the request with max_tokens 1, stream false (no stream_options) and
 *           kv_transfer_params {"do_remote_decode": true, "do_remote_prefill": false, ...};
 *           its answer's kv_transfer_params go to the decode backend with the original request
 *   sglang  both get the request with bootstrap_host, bootstrap_port (the prefill backend's)
 *           and bootstrap_room (random, 63 bits) added, at once: the decode one is sent as soon
 *           as the prefill one is written; the prefill answer is read and dropped
 *
 * The client gets the decode backend's answer as any answer. A body the strict view refuses is
 * answered 400 (the pool reads bodies strictly); a body shorter than min_prompt_bytes, not
 * JSON object, too long for a body buffer, or not whole before admission decodes in place.
 * A client may not send the fields the proxy sets (kv_transfer_params, bootstrap_*): 400. A
 * failed prefill (no connection, a reset, not 200, an answer without kv_transfer_params) is
 * retried on another prefill backend while the prefill pool's retry budget allows (two
 * retries at most), then decodes in place (on_prefill_failure: decode_only) or is answered
 * 502. The prefill attempt lives in this feature's context (nothing allocated but the
 * rewritten bodies' buffers, from the worker's body buffers) and ends with the exchange: a
 * client that leaves closes both connections.
 *
 * The upstream half and the client side ask two things of it: whether the exchange still
 * waits for its prefill (the relay drives it then, as a queued one), and the body to send to
 * the decode backend in place of the client's.
 */
#ifndef ACCELNET_PROXY_PD_H
#define ACCELNET_PROXY_PD_H

#include "core/buf.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

extern const struct xhook pd_hook;

/* The pool of <x> disaggregates: read its body strictly. Not a mere question: when it does,
 * P/D joins <x> here (xhooks.h), so that its req_body hook reads the body (the stage
 * classify calls it, once). */
int pd_wants_body(struct exchange *x);
/* The stage admit, before dispatch: a prefill begins (pd_waiting then); 0, or -EPERM for a
 * body that sets the proxy's fields (the caller answers 400, PD_REFUSAL), or -EBADMSG for a
 * body it could not read whole as a JSON object to check (chunked: 411; longer than a body
 * buffer, or not strict JSON: 400, PD_UNCHECKED). */
int pd_begin(struct exchange *x);
#define PD_REFUSAL "kv_transfer_params and bootstrap_* are set by the proxy on a disaggregated pool"
#define PD_UNCHECKED                                                                               \
	"a disaggregated pool takes a request body only as one JSON object with a "                \
	"Content-Length, "                                                                         \
	"within limits.body_buffer_bytes, which the proxy reads whole"
/* Does <x> wait for its prefill (the relay drives it with pd_run, and notices a client gone)? */
int pd_waiting(const struct exchange *x);
/* Drive the prefill: RUN_STAY while it goes on; else what the decode's dispatch (or the
 * answer of a failure) returned. */
enum run pd_run(struct exchange *x);
/* The prefill's clock (deadline.c): connected and sent within timeouts.connect_ms, answered
 * within timeouts.first_byte_ms after; past it, the prefill fails (pd_timeout: another
 * backend, decode in place, or 502). */
uint64_t pd_deadline(const struct exchange *x);
enum run pd_timeout(struct exchange *x, uint64_t now);
/* The body the decode backend gets instead of the client's (NULL: the client's): the relay
 * sends its bytes, consuming them, then drops the client's. */
struct buf *pd_decode_body(const struct exchange *x);
/* The name of the last prefill backend <x> was sent to (the access log and /debug/requests
 * show it beside the decode backend), or NULL: none. Valid until the exchange ends. */
const char *pd_prefill_backend(const struct exchange *x);

#endif
