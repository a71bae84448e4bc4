/*
 * sse.c - whether a request gets heartbeats (see sse.h); the heartbeats themselves and the
 * hand-over to the backend's stream are the codec's (relay.c, h2.c).
 */
#include "proxy/sse.h"
#include "proxy/pace.h"

#include <stdio.h>
#include <string.h>

void sse_setup(struct exchange *x, const struct http_head *h)
{
	struct xpace *p = exchange_pace(x);
	if (!x->route->sse_heartbeat_ms || h->minor != 1 || h->meth == HTTP_HEAD)
		return; /* a HEAD answer has no body: an event stream there would desync the client
			 */
	const struct http_header *a = http_find_header(h, "Accept");
	p->sse_hb = a && memmem(a->value.p, a->value.len, "text/event-stream", 17);
	p->sse_body = h->framing == HTTP_BODY_LENGTH;
	p->hb_next_ms = loop_now(x->w->loop) + x->route->sse_heartbeat_ms;
}

int sse_refusal(const struct http_head *h, int close_ok, char *detail, size_t cap)
{
	if (h->status == 200 && http_is_event_stream(h) && h->framing != HTTP_BODY_NONE &&
	    (close_ok || h->framing != HTTP_BODY_CLOSE))
		return 0;
	snprintf(detail, cap, "the backend answered %d%s", h->status,
		 h->status != 200 ? ""
		 : close_ok	  ? " without an event stream"
				  : " without a chunked event stream");
	return h->status == 200 ? 502 : h->status;
}

void sse_decide(struct exchange *x)
{
	struct xpace *p = exchange_pace(x);
	if (!p->sse_body)
		return;
	p->sse_body = 0;
	p->sse_hb = p->sse_hb || (x->reqbody.view_ok && x->reqbody.view.stream);
	p->hb_next_ms = loop_now(x->w->loop) + x->route->sse_heartbeat_ms;
}
