/*
 * engine_grpc.c - OpenAI requests to an engine's gRPC Generate service (see engine_grpc.h).
 *
 * The response is written in units, each whole or not at all, into the room the stream
 * gives: the head (with a streamed chat's first event, the assistant's role), one chunk per
 * engine message (an SSE event, or a piece of the JSON string; as many of its tokens as fit,
 * the rest in the next unit), and the end (the text still held back, the finish reason, the
 * usage, [DONE], the last chunk). A unit that does not fit waits for the next pump, with the
 * message's walk (pos) and the detokenizer's state as they were before it.
 */
#include "proxy/engine_grpc.h"
#include "conf/model.h"
#include "http/grpc.h"
#include "http/parse.h"
#include "http/rewrite.h"
#include "runtime/tokprompt.h"
#include "tok/tokmodel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FRAME_HEAD 5
#define PIECE_MAX 1024 /* a token's text past this is dropped (none of a real vocabulary's) */
#define SIZE_LINE 10   /* "ffffffff\r\n", the most a chunk's size line takes */

/* JSON string contents for s[0..n) into out[0..cap): its length, or -1 when it does not fit. */
static long json_escape(char *out, size_t cap, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (cap - o < 6)
			return -1;
		if (ch == '"' || ch == '\\') {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else if (ch < 0x20 || ch == 0x7f) {
			memcpy(out + o, "\\u00", 4);
			out[o + 4] = hex[ch >> 4];
			out[o + 5] = hex[ch & 15];
			o += 6;
		} else {
			out[o++] = (char)ch;
		}
	}
	return (long)o;
}

/* Printable ASCII of s[0..n) into out[0..cap) (NUL-ended), the rest as '?'. */
static void printable(char *out, size_t cap, const char *s, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < cap; i++)
		out[o++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[o] = '\0';
}

static void answer(struct engine_call *c, int status, const char *detail)
{
	c->phase = ENG_ANSWER;
	if (!c->answer && !(c->answer = buf_get(&c->w->bufs)))
		return; /* pump cuts it */
	struct rewrite_error_info e = {
	    .status = status, .detail = detail, .keep_alive = 1, .openai = 1};
	int n = rewrite_error(c->answer->data, c->answer->cap, &e);
	c->answer->start = 0;
	c->answer->end = n > 0 ? (uint32_t)n : 0;
}

void engine_call_refuse(struct engine_call *c, struct worker *w, int status, const char *detail)
{
	memset(c, 0, sizeof(*c));
	c->w = w;
	c->grpc_status = -1;
	answer(c, status, detail);
}

int engine_call_begin(struct engine_call *c, struct worker *w, const struct conf_engine *e,
		      const char *req, size_t len, struct buf *out)
{
	memset(c, 0, sizeof(*c));
	c->w = w;
	c->tm = e->tm->tm;
	c->grpc_status = -1;
	c->created = (uint64_t)time(NULL);
	struct http_head h;
	int hl = http_parse_request(req, len, len, &h);
	if (hl <= 0) {
		answer(c, 400, "malformed request");
		return 0;
	}
	size_t plen = h.path.len;
	const char *q = memchr(h.path.p, '?', plen);
	if (q)
		plen = (size_t)(q - h.path.p);
	if (plen == 20 && !memcmp(h.path.p, "/v1/chat/completions", 20))
		c->chat = 1;
	else if (!(plen == 15 && !memcmp(h.path.p, "/v1/completions", 15))) {
		answer(c, 404,
		       "a gRPC engine pool serves POST /v1/chat/completions and /v1/completions");
		return 0;
	}
	if (h.meth != HTTP_POST) {
		answer(c, 405, "use POST");
		return 0;
	}
	const struct http_header *id = http_find_header(&h, "x-request-id");
	if (id && id->value.len && id->value.len <= ENGINE_RID_MAX)
		printable(c->rid, sizeof(c->rid), id->value.p, id->value.len);
	else
		snprintf(c->rid, sizeof(c->rid), "accelnet-%llx", (unsigned long long)w->rng++);
	for (char *r = c->rid; *r; r++)
		if (*r == '"' || *r == '\\')
			*r = '_';
	if (!w->tokp && !(w->tokp = calloc(1, sizeof(*w->tokp))))
		return -ENOMEM;
	c->vllm = e->api == CONF_ENGINE_VLLM_GRPC;
	struct engine_req r = {.dialect = c->vllm ? ENGINE_VLLM : ENGINE_SGLANG,
			       .rid = {c->rid, strlen(c->rid)}};
	char model[ENGINE_MODEL_MAX], why[200];
	long n = tokprompt_engine(w->tokp, c->tm, req + hl, len - (size_t)hl, c->chat, &r,
				  (uint8_t *)out->data + out->end, buf_room(out), model,
				  sizeof(model), why, sizeof(why));
	if (n == -ENOMEM || n == -ENOSPC)
		return (int)n;
	if (n < 0) {
		answer(c, 400, why);
		return 0;
	}
	out->end += (uint32_t)n;
	c->stream = r.stream;
	c->nprompt = r.nids;
	size_t ml = strlen(model);
	long m;
	while ((m = json_escape(c->model, sizeof(c->model) - 1, model, ml)) < 0)
		do /* cut at a character */
			ml--;
		while (ml && ((unsigned char)model[ml] & 0xc0) == 0x80);
	c->model[m] = '\0';
	return 1;
}

void engine_call_header(struct engine_call *c, const char *name, size_t nlen, const char *value,
			size_t vlen)
{
	char num[16];
	if (nlen == 7 && !memcmp(name, ":status", 7)) {
		printable(num, sizeof(num), value, vlen);
		c->http_status = atoi(num);
	} else if (nlen == 12 && !memcmp(name, "content-type", 12)) {
		c->grpc_ct = http_grpc_is(value, vlen);
	} else if (nlen == 11 && !memcmp(name, "grpc-status", 11)) {
		printable(num, sizeof(num), value, vlen);
		c->grpc_status =
		    vlen && vlen < 4 && strspn(num, "0123456789") == vlen ? atoi(num) : 2;
	} else if (nlen == 12 && !memcmp(name, "grpc-message", 12)) {
		printable(c->grpc_message, sizeof(c->grpc_message), value, vlen);
	}
}

int engine_call_data(struct engine_call *c, const uint8_t *p, size_t n)
{
	struct worker *w = c->w;
	if (!c->gin && !(c->gin = buf_get(&w->bufs)))
		return -EPROTO;
	if (buf_room(c->gin) < n)
		buf_compact(c->gin);
	if (buf_room(c->gin) < n && c->gin->cap == w->bufs.size) {
		/* a message larger than a buffer: into a body buffer */
		struct buf *big = buf_get(&w->body_bufs);
		if (!big || big->cap < buf_len(c->gin) + n) {
			worker_buf_put(w, big);
			return -EPROTO;
		}
		memcpy(big->data, buf_head(c->gin), buf_len(c->gin));
		big->start = 0;
		big->end = (uint32_t)buf_len(c->gin);
		buf_put(&w->bufs, c->gin);
		c->gin = big;
	}
	if (buf_room(c->gin) < n)
		return -EPROTO;
	memcpy(c->gin->data + c->gin->end, p, n);
	c->gin->end += (uint32_t)n;
	return 0;
}

void engine_call_end(struct engine_call *c)
{
	c->end_in = 1;
}

/* A whole message waits in gin: *len its frame's bytes. 1, 0 (not yet), -1 (malformed). */
static int frame_ready(const struct engine_call *c, uint32_t *len)
{
	if (!c->gin || buf_len(c->gin) < FRAME_HEAD)
		return 0;
	const uint8_t *p = (const uint8_t *)c->gin->data + c->gin->start;
	if (p[0] != 0)
		return -1; /* compressed: we asked for none (no grpc-accept-encoding) */
	uint64_t n = (uint64_t)p[1] << 24 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 8 | p[4];
	if (n + FRAME_HEAD > c->w->body_bufs.size - c->w->bufs.size / 4)
		return -1; /* past what gin can ever hold */
	if (buf_len(c->gin) < n + FRAME_HEAD)
		return 0;
	*len = (uint32_t)(n + FRAME_HEAD);
	return 1;
}

int engine_call_holding(const struct engine_call *c)
{
	uint32_t len;
	return c->have_msg || frame_ready(c, &len) == 1;
}

/* The response head, and a streamed chat's first event: 1 written (*w advanced), 0 no room. */
static int put_head(struct engine_call *c, char *out, size_t cap, size_t *w)
{
	char b[1024];
	const char *type = c->stream ? "text/event-stream; charset=utf-8" : "application/json";
	int n = snprintf(b, sizeof(b),
			 "HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncache-control: no-cache\r\n"
			 "x-request-id: %s\r\ntransfer-encoding: chunked\r\n\r\n",
			 type, c->rid);
	char body[600];
	int k;
	const char *obj = c->chat ? "chat.completion" : "text_completion";
	const char *pre = c->chat ? "chatcmpl-" : "cmpl-";
	if (c->stream && c->chat)
		k = snprintf(body, sizeof(body),
			     "data: {\"id\":\"%s%s\",\"object\":\"chat.completion.chunk\","
			     "\"created\":%llu,\"model\":\"%s\",\"choices\":[{\"index\":0,"
			     "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
			     "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
			     pre, c->rid, (unsigned long long)c->created, c->model);
	else if (c->stream)
		k = 0;
	else
		k = snprintf(body, sizeof(body),
			     "{\"id\":\"%s%s\",\"object\":\"%s\",\"created\":%llu,\"model\":\"%s\","
			     "\"choices\":[{\"index\":0,%s",
			     pre, c->rid, obj, (unsigned long long)c->created, c->model,
			     c->chat ? "\"message\":{\"role\":\"assistant\",\"content\":\""
				     : "\"text\":\"");
	if (n < 0 || k < 0 || (size_t)n >= sizeof(b) || (size_t)k >= sizeof(body))
		return 0;
	if (k)
		n += snprintf(b + n, sizeof(b) - (size_t)n, "%x\r\n%.*s\r\n", k, k, body);
	if ((size_t)n >= sizeof(b) || cap - *w < (size_t)n)
		return 0;
	memcpy(out + *w, b, (size_t)n);
	*w += (size_t)n;
	c->head_out = 1;
	return 1;
}

/* An event's text wrapper, before and after the escaped text (streamed: an SSE event;
 * else nothing: the text goes inside the JSON answer's string). */
static int wrap(const struct engine_call *c, char *pre, size_t cap, const char **post)
{
	if (!c->stream) {
		*post = "";
		return 0;
	}
	*post = c->chat ? "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
			: "\",\"logprobs\":null,\"finish_reason\":null}]}\n\n";
	return snprintf(
	    pre, cap,
	    "data: {\"id\":\"%s%s\",\"object\":\"%s\",\"created\":%llu,\"model\":\"%s\","
	    "\"choices\":[{\"index\":0,%s",
	    c->chat ? "chatcmpl-" : "cmpl-", c->rid,
	    c->chat ? "chat.completion.chunk" : "text_completion", (unsigned long long)c->created,
	    c->model, c->chat ? "\"delta\":{\"content\":\"" : "\"text\":\"");
}

/* Chunk <body>[0..n), written at out + *w + SIZE_LINE, framed in place. */
static void frame(char *out, size_t *w, size_t n)
{
	char line[SIZE_LINE + 1];
	int k = snprintf(line, sizeof(line), "%zx\r\n", n);
	memmove(out + *w + (size_t)k, out + *w + SIZE_LINE, n);
	memcpy(out + *w, line, (size_t)k);
	memcpy(out + *w + (size_t)k + n, "\r\n", 2);
	*w += (size_t)k + n + 2;
}

/*
 * Text of the message's ids from pos on, as one unit: 1 when they are all written (the
 * message is done), 0 when room ran out first (what fit is written).
 */
static int put_text(struct engine_call *c, char *out, size_t cap, size_t *w)
{
	char pre[600], piece[3 * (PIECE_MAX + 4)];
	const char *post;
	int pl = wrap(c, pre, sizeof(pre), &post);
	size_t postl = strlen(post);
	if (pl < 0 || (size_t)pl >= sizeof(pre))
		return 0;
	for (;;) {
		size_t room = cap - *w;
		if (room < SIZE_LINE + (size_t)pl + postl + 2 + 16)
			return 0;
		char *body = out + *w + SIZE_LINE;
		size_t avail = room - SIZE_LINE - 2 - postl, bl = (size_t)pl;
		memcpy(body, pre, (size_t)pl);
		int all = 0;
		for (;;) {
			struct engine_idpos at = c->pos;
			struct detok dt = c->dt;
			uint32_t id;
			if (!engine_pb_next_id(&c->msg, &c->pos, &id)) {
				all = 1;
				break;
			}
			long n = detok_room(&c->tm->tok, id) <= sizeof(piece)
				     ? detok_piece(&c->tm->tok, &c->dt, id, piece, sizeof(piece))
				     : 0;
			long e = n > 0 ? json_escape(body + bl, avail - bl, piece, (size_t)n) : 0;
			if (e < 0) {
				c->pos = at;
				c->dt = dt;
				break;
			}
			bl += (size_t)e;
			c->ngot++;
		}
		if (bl > (size_t)pl) {
			memcpy(body + bl, post, postl);
			frame(out, w, bl + postl);
		} else if (!all) {
			return 0; /* not one token fit: wait for room */
		}
		if (all)
			return 1;
	}
}

/* The usage object into out[0..cap). */
static int usage(const struct engine_call *c, char *out, size_t cap)
{
	uint64_t p = c->has_prompt ? c->prompt : c->nprompt;
	uint64_t k = c->has_completion ? c->completion : c->ngot;
	char cached[80] = "";
	if (c->has_cached)
		snprintf(cached, sizeof(cached),
			 ",\"prompt_tokens_details\":{\"cached_tokens\":%llu}",
			 (unsigned long long)c->cached);
	return snprintf(
	    out, cap, "{\"prompt_tokens\":%llu,\"completion_tokens\":%llu,\"total_tokens\":%llu%s}",
	    (unsigned long long)p, (unsigned long long)k, (unsigned long long)(p + k), cached);
}

/* The end of a good answer, all of it or nothing: 1 written, 0 no room. */
static int put_end(struct engine_call *c, char *out, size_t cap, size_t *w)
{
	char b[4096], u[300], tail[DETOK_END_MAX];
	struct detok dt = c->dt;
	size_t tl = detok_end(&c->tm->tok, &dt, tail, sizeof(tail));
	size_t n = 0;
	const char *fin = c->finish[0] ? c->finish : "stop";
	if (usage(c, u, sizeof(u)) < 0)
		return 0;
	if (c->stream) {
		char pre[600], ev[3072];
		const char *post;
		int pl = wrap(c, pre, sizeof(pre), &post);
		int k = 0;
		if (tl)
			k = snprintf(ev, sizeof(ev), "%s%.*s%s", pre, (int)tl, tail, post);
		const char *o = c->chat ? "chat.completion.chunk" : "text_completion";
		const char *id = c->chat ? "chatcmpl-" : "cmpl-";
		k += snprintf(ev + k, sizeof(ev) - (size_t)k,
			      "data: {\"id\":\"%s%s\",\"object\":\"%s\",\"created\":%llu,\"model\":"
			      "\"%s\",\"choices\":[{\"index\":0,%s\"logprobs\":null,"
			      "\"finish_reason\":\"%s\"}]}\n\n"
			      "data: {\"id\":\"%s%s\",\"object\":\"%s\",\"created\":%llu,\"model\":"
			      "\"%s\",\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n",
			      id, c->rid, o, (unsigned long long)c->created, c->model,
			      c->chat ? "\"delta\":{}," : "\"text\":\"\",", fin, id, c->rid, o,
			      (unsigned long long)c->created, c->model, u);
		if (pl < 0 || k < 0 || (size_t)k >= sizeof(ev))
			return 0;
		n = (size_t)snprintf(b, sizeof(b), "%x\r\n%s\r\n0\r\n\r\n", k, ev);
	} else {
		char body[1000];
		int k =
		    snprintf(body, sizeof(body),
			     "%.*s\"%s,\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":%s}",
			     (int)tl, tail, c->chat ? "}" : "", fin, u);
		if (k < 0 || (size_t)k >= sizeof(body))
			return 0;
		n = (size_t)snprintf(b, sizeof(b), "%x\r\n%s\r\n0\r\n\r\n", k, body);
	}
	if (n >= sizeof(b) || cap - *w < n)
		return 0;
	memcpy(out + *w, b, n);
	*w += n;
	c->dt = dt;
	return 1;
}

/* The answer ends in error <status> (detail: why): an OpenAI error while nothing went out;
 * after, a stream's error event and its end, or a cut. 1 written, 0 no room, -EPROTO: cut. */
static int put_error(struct engine_call *c, char *out, size_t cap, size_t *w, int status,
		     const char *detail)
{
	struct rewrite_error_info e = {
	    .status = status, .detail = detail, .keep_alive = 1, .openai = 1, .request_id = c->rid};
	if (c->head_out && !c->stream)
		return -EPROTO;
	int n = c->head_out ? rewrite_sse_error(out + *w, cap - *w, &e)
			    : rewrite_error(out + *w, cap - *w, &e);
	if (n < 0)
		return 0;
	*w += (size_t)n;
	return 1;
}

/* Read the next whole message of gin into c->msg: 1, 0 (none yet), -1 (not a message). */
static int read_msg(struct engine_call *c)
{
	uint32_t len;
	int r = frame_ready(c, &len);
	if (r <= 0)
		return r;
	const uint8_t *p = (const uint8_t *)c->gin->data + c->gin->start + FRAME_HEAD;
	if (engine_pb_read(p, len - FRAME_HEAD, &c->msg) < 0)
		return -1;
	c->msg_len = len;
	c->have_msg = 1;
	memset(&c->pos, 0, sizeof(c->pos));
	if (c->msg.has_prompt)
		c->prompt = c->msg.prompt_tokens, c->has_prompt = 1;
	/* vLLM counts a chunk's ids, not the stream's so far, and its closing complete repeats
	 * the last chunk's: the ids given are its count */
	if (c->msg.has_completion && !c->vllm)
		c->completion = c->msg.completion_tokens, c->has_completion = 1;
	if (c->msg.has_cached)
		c->cached = c->msg.cached_tokens, c->has_cached = 1;
	if (c->msg.kind == ENGINE_CHUNK && c->msg.nids)
		c->chunk_ids = 1;
	else if (c->msg.kind == ENGINE_COMPLETE && c->chunk_ids)
		c->msg.kind = ENGINE_NONE; /* its ids came in the chunks: only its counts */
	if (c->msg.kind == ENGINE_COMPLETE || (c->msg.kind == ENGINE_NONE && c->msg.finish.n)) {
		c->finished = 1;
		size_t i = 0;
		for (; i < c->msg.finish.n && i + 1 < sizeof(c->finish); i++) {
			char ch = c->msg.finish.p[i];
			if (!((ch >= 'a' && ch <= 'z') || ch == '_'))
				break;
			c->finish[i] = ch;
		}
		c->finish[i == c->msg.finish.n ? i : 0] = '\0';
	}
	return 1;
}

static void msg_done(struct engine_call *c)
{
	buf_consume(c->gin, c->msg_len);
	c->have_msg = 0;
}

long engine_call_pump(struct engine_call *c, char *out, size_t cap)
{
	size_t w = 0;
	if (c->phase == ENG_ANSWER) {
		if (!c->answer || !buf_len(c->answer))
			return -EPROTO;
		size_t k = buf_len(c->answer) < cap ? buf_len(c->answer) : cap;
		memcpy(out, buf_head(c->answer), k);
		buf_consume(c->answer, k);
		if (!buf_len(c->answer))
			c->phase = ENG_DONE;
		return (long)k;
	}
	while (c->phase == ENG_CALL) {
		char why[200];
		if (!c->have_msg) {
			int r = read_msg(c);
			if (r < 0) {
				int e =
				    put_error(c, out, cap, &w, 502,
					      "the engine sent what is not its Generate messages");
				if (e < 0)
					return e;
				if (e)
					c->phase = ENG_DONE;
				break;
			}
			if (r == 0 && !c->end_in)
				break;
			if (r == 0) { /* the engine's end */
				int st = c->grpc_status, e;
				if (c->http_status != 200 || !c->grpc_ct) {
					snprintf(why, sizeof(why),
						 "the engine did not answer gRPC (HTTP status %d)",
						 c->http_status);
					e = put_error(c, out, cap, &w, 502, why);
				} else if (st < 0) {
					e = put_error(c, out, cap, &w, 502,
						      "the engine ended without a grpc-status");
				} else if (st) {
					snprintf(why, sizeof(why), "engine: grpc-status %d: %s", st,
						 c->grpc_message);
					e = put_error(c, out, cap, &w, http_grpc_to_http(st), why);
				} else if (!c->head_out && !put_head(c, out, cap, &w)) {
					e = 0;
				} else {
					e = put_end(c, out, cap, &w);
				}
				if (e < 0)
					return e;
				if (e)
					c->phase = ENG_DONE;
				break;
			}
		}
		if (c->msg.kind == ENGINE_ERROR) {
			char st[8], msg[120];
			printable(st, sizeof(st), c->msg.http_status.p, c->msg.http_status.n);
			printable(msg, sizeof(msg), c->msg.message.p, c->msg.message.n);
			int s = atoi(st);
			snprintf(why, sizeof(why), "engine: %s", msg);
			int e = put_error(c, out, cap, &w, s >= 400 && s <= 599 ? s : 500, why);
			if (e < 0)
				return e;
			if (e) /* else tried again at the next pump (have_msg stays) */
				c->phase = ENG_DONE;
			break;
		}
		if (!c->head_out && !put_head(c, out, cap, &w))
			break;
		if (!put_text(c, out, cap, &w))
			break;
		msg_done(c);
	}
	return (long)w;
}

void engine_call_free(struct engine_call *c)
{
	if (!c->w)
		return;
	worker_buf_put(c->w, c->gin);
	worker_buf_put(c->w, c->answer);
	c->gin = c->answer = NULL;
}
