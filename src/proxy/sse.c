/*
 * sse.c - the proxy's own event-stream head, heartbeats, and handing the stream over to the
 * backend's answer (see sse.h).
 */
#include "proxy/sse.h"
#include "http/prompt.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

void sse_setup(struct exchange *x, const struct http_head *h)
{
	if (!x->route->sse_heartbeat_ms || h->minor != 1 || h->meth == HTTP_HEAD)
		return; /* a HEAD answer has no body: an event stream there would desync the client
			 */
	const struct http_header *a = http_find_header(h, "Accept");
	x->sse_hb = a && memmem(a->value.p, a->value.len, "text/event-stream", 17);
	x->sse_body = h->framing == HTTP_BODY_LENGTH;
	x->hb_next_ms = loop_now(x->w->loop) + x->route->sse_heartbeat_ms;
}

void sse_decide(struct exchange *x, const char *body, size_t len)
{
	if (!x->sse_body)
		return;
	x->sse_body = 0;
	x->sse_hb = x->sse_hb || (body && http_wants_stream(body, len));
	x->hb_next_ms = loop_now(x->w->loop) + x->route->sse_heartbeat_ms;
}

void sse_heartbeat(struct client *cl)
{
	struct exchange *x = cl->x;
	x->hb_next_ms = loop_now(cl->w->loop) + x->route->sse_heartbeat_ms;
	if (client_out_pending(cl))
		return; /* the last one is still unread: a client that does not read gets no more */
	if (!client_out_buf(cl))
		return;
	if (!x->early_head) {
		int n = rewrite_sse_head(cl->out->data + cl->out->end, buf_room(cl->out), x->reqid);
		if (n < 0)
			return;
		cl->out->end += (uint32_t)n;
		x->early_head = 1;
	}
	int n = rewrite_sse_comment(cl->out->data + cl->out->end, buf_room(cl->out), "waiting");
	if (n > 0)
		cl->out->end += (uint32_t)n;
}

enum run sse_continue(struct client *cl, const struct http_head *h, size_t len)
{
	struct exchange *x = cl->x;
	const struct http_header *ct = http_find_header(h, "Content-Type");
	int sse =
	    ct && ct->value.len >= 17 && strncasecmp(ct->value.p, "text/event-stream", 17) == 0;
	if (h->status != 200 || !sse || h->framing == HTTP_BODY_CLOSE ||
	    h->framing == HTTP_BODY_NONE) {
		char detail[80];
		snprintf(detail, sizeof(detail), "the backend answered %d%s", h->status,
			 h->status == 200 ? " without a chunked event stream" : "");
		return exchange_reply(x, h->status == 200 ? 502 : h->status, detail, 1);
	}
	buf_consume(x->up->in, len);
	if (h->framing == HTTP_BODY_LENGTH) {
		x->wrap_tail = 1;
		if (h->content_length) {
			int n = rewrite_chunk_size(cl->out->data + cl->out->end, buf_room(cl->out),
						   h->content_length);
			if (n < 0)
				return exchange_abort(x, "client does not read its event stream");
			cl->out->end += (uint32_t)n;
			x->wrap_size = 1;
		}
	}
	exchange_response_started(x);
	return RUN_AGAIN;
}
