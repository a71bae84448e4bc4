/*
 * llm_explain.h - balance: llm's decisions, shown to operators: for each request what the
 * pick expected of every candidate (hit blocks, wait, the fitted base and per-block costs,
 * the expected time to first token), why the pick won, and what then happened (the time to
 * the response body's first byte, the engine's reported cached prompt tokens).
 *
 * It is a feature on the exchange's hooks (xhooks.h) with one fixed record per exchange in
 * its own context, joined at the stage classify when the route's pool or its spillover pool
 * explains its picks (llm_explain_classify()): the waiter then points at that record, and every
 * pick made for the request -- its admission, a grant from the queue on any worker, a retry --
 * reads its decision back into it when the pool's balancer explains its picks (runtime/pick.h,
 * policy/lb.h lb_ops.explain: balance: llm); the last one stands. A hedge's copy is not
 * recorded. The record is written by a granting worker only while the request is queued, and
 * read by its own worker only when it is not (the grant reaches it through its inbox's lock).
 *
 * What it shows, from that record:
 *  - /debug/requests: llm_explain_view() copies the decision with the backends' names, the
 *    predicted and measured time to first token and hit blocks (debugreq.h writes them);
 *  - the response header X-Accelnet-Llm when the pool's llm.explain is on (the operator's
 *    choice: nothing a client sends turns it on), llm_explain_header();
 *  - accelnet_llm_predict_* per backend (runtime/proxy_metric.h), counted at the exchange's
 *    end into the worker's own shard.
 *
 * The measured time to first token is the answering attempt's own (attempt.h: first_ns
 * against sent_ns, stamped once by up_h1.c for balance: llm's fit: a whole answer's head, an
 * event stream's first body bytes), so the prediction is compared with what the fit learns
 * from; a response with an error status, or an event stream without a prompt, has none. Cached
 * tokens come from the response's usage (http/usage.h) as the tallies' one scanner reads it
 * (tally.h: scanned without being counted when the tallies do not count the response's tokens), so
 * what the tallies, the access log and the token limits count is left as it was. They are turned
 * into blocks of the pool's llm.block_bytes at LLM_EXPLAIN_BYTES_PER_TOKEN bytes of prompt text a
 * token (the rough rule for English text, and accelnet sim's own), at most the prompt's blocks.
 */
#ifndef ACCELNET_PROXY_LLM_EXPLAIN_H
#define ACCELNET_PROXY_LLM_EXPLAIN_H

#include "policy/lb.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

#include <stddef.h>
#include <stdint.h>

#define LLM_EXPLAIN_BYTES_PER_TOKEN 4
#define LLM_EXPLAIN_NAME 72 /* a backend's name, as struct backend holds it */

/* One decision as /debug/requests shows it: copied on the exchange's worker. */
struct llm_explain_view {
	uint8_t has;	/* a decision was recorded (else nothing below is set) */
	uint8_t why;	/* enum lb_why */
	uint8_t waited; /* a pick answered "wait" for it before */
	uint8_t ncand;	/* in cand[], the pick first when there is one */
	uint8_t picked; /* the decision chose a backend: cand[0] */
	uint8_t has_measured, has_reported;
	uint16_t nseen;	 /* candidates up at the last pick */
	uint32_t blocks; /* the prompt's */
	uint32_t waited_ms;
	uint32_t measured_us;	  /* request sent to the first token, when has_measured */
	uint32_t reported_blocks; /* the engine's cached tokens as blocks, when has_reported */
	uint64_t cached_tokens;	  /* ... as it reported them */
	char answered[LLM_EXPLAIN_NAME]; /* the backend that answered, "" when none yet */
	struct {
		char name[LLM_EXPLAIN_NAME];
		struct lb_estimate e;
	} cand[LB_EXPLAIN_MAX];
};

extern const struct xhook llm_explain_hook;

/* The stage classify, <x>'s route and pool known, before any pick: when its pool or its
 * route's spillover pool explains its picks (balance: llm), join <x> and point its waiter at
 * the record; else nothing (no loop over the config's pools). */
void llm_explain_classify(struct exchange *x);

/* What <x>'s decision was and what happened so far, into <v> (v->has 0: none to show). */
void llm_explain_view(const struct exchange *x, struct llm_explain_view *v);

/*
 * The X-Accelnet-Llm line(s) for <x>'s response head, CRLF-ended, when its pool has
 * llm.explain on and a decision was recorded: into out[0..cap). Returns the length, 0 when
 * there is nothing to say, -1 when it does not fit.
 */
int llm_explain_header(const struct exchange *x, char *out, size_t cap);

#endif
