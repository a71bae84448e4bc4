/*
 * sticky.c - what names a request's conversation, and the ids of the answers (see sticky.h).
 */
#include "proxy/sticky.h"
#include "policy/stick.h"
#include "proxy/exchange.h"
#include "proxy/worker.h"
#include "runtime/pool.h"

#include <string.h>

/* The context of one exchange. */
struct sticky_x {
	uint8_t responses; /* a /v1/responses request of a pool with responses_api */
	uint8_t state;	   /* the scan of its answer for "id" (enum scan) */
	uint8_t matched;   /* bytes of "\"id\"" matched so far */
	uint8_t len;	   /* bytes of the id so far */
	uint16_t seen;	   /* bytes of the answer scanned */
	char id[STICKY_ID_MAX];
};

enum scan { SCAN_KEY, SCAN_COLON, SCAN_QUOTE, SCAN_ID, SCAN_DONE };

static size_t sticky_off;

static uint32_t sticky_bit; /* joined on a pool with sessions (sticky_classify()) */

static struct sticky_x *ctx_of(struct exchange *x)
{
	return xhooks_join(x, &sticky_hook);
}

/* The value of cookie <name> in Cookie field <v> ("a=b; c=d"), or an empty string. */
static struct http_str cookie_value(struct http_str v, const char *name)
{
	size_t nlen = strlen(name);
	const char *p = v.p, *end = v.p + v.len;
	while (p < end) {
		while (p < end && (*p == ' ' || *p == '\t' || *p == ';'))
			p++;
		const char *e = memchr(p, ';', (size_t)(end - p));
		if (!e)
			e = end;
		if ((size_t)(e - p) > nlen && p[nlen] == '=' && memcmp(p, name, nlen) == 0) {
			const char *s = p + nlen + 1, *t = e;
			while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
				t--;
			return (struct http_str){s, (size_t)(t - s)};
		}
		p = e;
	}
	return (struct http_str){NULL, 0};
}

static int is_responses_path(struct http_str path)
{
	static const char p[] = "/v1/responses";
	size_t n = sizeof(p) - 1;
	return path.len >= n && memcmp(path.p, p, n) == 0 &&
	       (path.len == n || path.p[n] == '?' || path.p[n] == '/');
}

void sticky_classify(struct exchange *x, const struct http_head *h)
{
	const struct conf_session *s = &x->pool->conf->session;
	x->wt.has_session = 0;
	if (!s->enabled)
		return;
	struct sticky_x *c = ctx_of(x);
	struct http_str v = {NULL, 0};
	if (s->header[0]) {
		const struct http_header *f = http_find_only_header(h, s->header);
		if (f)
			v = f->value;
	}
	/* the cookie, when no header names the session (every Cookie field is looked at) */
	for (unsigned i = 0; s->cookie && !v.len && i < h->nheaders; i++)
		if (http_str_eq(h->headers[i].name, "cookie"))
			v = cookie_value(h->headers[i].value, s->cookie);
	if (v.len) {
		x->wt.session = stick_key(STICK_NAMED, v.p, v.len);
		x->wt.has_session = 1;
		x->wt.session_learn = 1;
	}
	c->responses = s->responses_api && is_responses_path(h->path);
	x->reqbody.want_session =
	    c->responses && h->framing == HTTP_BODY_LENGTH && h->content_length > 0;
}

/* The body is in: its "previous_response_id" names the conversation (over a header's: it
 * names the very answer the backend keeps). */
static void sticky_req_body(struct exchange *x, const char *body, size_t len)
{
	struct reqbody *rb = &x->reqbody;
	if (!rb->want_session)
		return;
	rb->want_session = 0;
	if (!x->req.done || x->req.framing != HTTP_BODY_LENGTH ||
	    reqbody_read_view(rb, body, len) < 0)
		return;
	struct json_span id = rb->view.prev_response;
	if (id.e < id.s + 2)
		return;
	/* (without its quotes; a response's id, never a session header's name) */
	x->wt.session = stick_key(STICK_RESPONSE, body + id.s + 1, id.e - id.s - 2);
	x->wt.has_session = 1;
	x->wt.session_learn = 0; /* its answer's own id is learned, not this one */
}

static void sticky_resp_head(struct exchange *x, const struct http_head *h)
{
	struct sticky_x *c = ctx_of(x);
	(void)h;
	if (c->responses && x->status == 200 && x->att && x->att->pool->stick)
		xhooks_want_body(x, &sticky_hook);
}

/* The id <c> read came from the current attempt's backend: remember it. */
static void learn(struct exchange *x, struct sticky_x *c)
{
	struct attempt *a = x->att;
	if (!a || !a->be || !a->pool->stick || !c->len)
		return;
	size_t idx = (size_t)(a->be - a->pool->backends);
	if (idx >= a->pool->nbackends)
		return;
	stick_put(a->pool->stick, stick_key(STICK_RESPONSE, c->id, c->len), (unsigned)idx,
		  (uint32_t)(loop_now(x->w->loop) / 1000), 1);
}

static int id_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '-' || ch == '.' || ch == ':';
}

static void sticky_resp_body(struct exchange *x, const char *p, size_t len)
{
	static const char key[] = "\"id\"";
	struct sticky_x *c = ctx_of(x);
	for (size_t i = 0; i < len && c->state != SCAN_DONE; i++) {
		char ch = p[i];
		if (++c->seen > STICKY_SCAN_MAX) {
			c->state = SCAN_DONE;
			break;
		}
		switch (c->state) {
		case SCAN_KEY:
			c->matched = ch == key[c->matched] ? c->matched + 1 : ch == '"';
			if (c->matched == sizeof(key) - 1)
				c->state = SCAN_COLON;
			break;
		case SCAN_COLON:
		case SCAN_QUOTE:
			if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
				break;
			if (c->state == SCAN_COLON && ch == ':')
				c->state = SCAN_QUOTE;
			else if (c->state == SCAN_QUOTE && ch == '"')
				c->state = SCAN_ID, c->len = 0;
			else
				c->state = SCAN_KEY, c->matched = ch == '"';
			break;
		case SCAN_ID:
			if (ch == '"') {
				learn(x, c);
				c->state = SCAN_DONE;
			} else if (!id_char(ch) || c->len == STICKY_ID_MAX) {
				c->state = SCAN_DONE; /* not an id we hold: learn nothing */
			} else {
				c->id[c->len++] = ch;
			}
			break;
		}
	}
}

const struct xhook sticky_hook = {
    .name = "sticky",
    .ctx_size = sizeof(struct sticky_x),
    .ctx_off = &sticky_off,
    .bit = &sticky_bit,
    .req_body = sticky_req_body,
    .resp_head = sticky_resp_head,
    .resp_body = sticky_resp_body,
};
