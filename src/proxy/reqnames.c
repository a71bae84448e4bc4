/*
 * reqnames.c - an exchange's request id and trace context, taken from a trusted client or
 * made here from the worker's generator (see reqnames.h).
 */
#include "proxy/reqnames.h"
#include "core/rand.h"

/* 32 lower-case hex digits (128 random bits); by hand, as snprintf cost a request 1.5k
 * instructions */
void reqnames_make_request_id(struct worker *w, char *out)
{
	trace_hex(rand_next(&w->rng), out, 16);
	trace_hex(rand_next(&w->rng), out + 16, 16);
	out[32] = 0;
}

/* A random id of <digits> hex digits that is not all zeros (W3C forbids them). */
static void random_trace_hex(struct worker *w, char *out, unsigned digits)
{
	for (unsigned i = 0; i < digits; i += 16) {
		uint64_t v = rand_next(&w->rng);
		trace_hex(v ? v : 1, out + i, 16);
	}
}

void reqnames_make(struct reqnames *n, struct worker *w, const struct http_head *h, int trusted)
{
	struct traceparent tp;
	const struct http_header *f;
	if (!trusted || !rewrite_incoming_request_id(h, n->reqid))
		reqnames_make_request_id(w, n->reqid);
	if (trusted && (f = http_find_only_header(h, "traceparent")) &&
	    traceparent_parse(f->value.p, f->value.len, &tp) == 0) {
		tp.flags &= TRACE_FLAGS_KEPT;
		n->pass_tracestate = 1;
	} else {
		random_trace_hex(w, tp.trace_id, TRACE_ID_HEX);
		tp.flags = TRACE_FLAG_SAMPLED;
	}
	random_trace_hex(w, tp.parent_id, SPAN_ID_HEX); /* this hop's span */
	traceparent_format(&tp, n->traceparent);
	n->want_timing = trusted && http_find_header(h, "x-accelnet-timing") != NULL;
}
