/*
 * engine_pb.c - the engines' Generate messages, SGLang's and vLLM's (see engine_pb.h).
 */
#include "http/engine_pb.h"

#include <errno.h>
#include <string.h>

/* GenerateRequest and its parts: the field numbers both engines share */
enum {
	REQ_ID = 1,
	REQ_TOKENIZED = 2,
	REQ_SAMPLING = 4,
	TOK_INPUT_IDS = 2,
	SP_TEMPERATURE = 1,
	SP_TOP_P = 2,
	SP_MAX_NEW_TOKENS = 8, /* vLLM's max_tokens */
};

/* ... and those where they differ: SGLang's, vLLM's */
static const struct {
	unsigned stream, stop, skip_special;
	const char *path;
} dialects[] = {
    [ENGINE_SGLANG] = {17, 9, 11, "/sglang.grpc.scheduler.SglangScheduler/Generate"},
    [ENGINE_VLLM] = {5, 10, 12, "/vllm.grpc.engine.VllmEngine/Generate"},
};

const char *engine_pb_path(enum engine_dialect d)
{
	return dialects[d].path;
}

/* GenerateResponse and its parts */
enum {
	RESP_ID = 1,
	IDS = 1, /* chunk's token_ids, complete's output_ids */
	CHUNK_PROMPT = 2,
	CHUNK_COMPLETION = 3,
	CHUNK_CACHED = 4,
	DONE_FINISH = 2,
	DONE_PROMPT = 3,
	DONE_COMPLETION = 4,
	DONE_CACHED = 5,
	ERR_MESSAGE = 1,
	ERR_HTTP_STATUS = 2,
};

#define FRAME_HEAD 5 /* gRPC: a compressed flag and a 32-bit big-endian length */
#define SAMPLING_MAX 512

long engine_pb_write(const struct engine_req *r, uint8_t *out, size_t cap)
{
	if (cap < FRAME_HEAD)
		return -ENOSPC;
	/* the sampling parameters first, to know their length */
	uint8_t sp[SAMPLING_MAX];
	struct pw_out s = {sp, 0, sizeof(sp), 0};
	if (r->has_temperature)
		pw_put_float(&s, SP_TEMPERATURE, r->temperature);
	if (r->has_top_p)
		pw_put_float(&s, SP_TOP_P, r->top_p);
	if (r->max_tokens >= 0)
		pw_put_uint(&s, SP_MAX_NEW_TOKENS, (uint64_t)r->max_tokens);
	pw_put_uint(&s, dialects[r->dialect].skip_special, 1);
	size_t stop_len = 0;
	for (size_t i = 0; i < r->nstop; i++)
		stop_len += pw_varint_len(dialects[r->dialect].stop << 3) +
			    pw_varint_len(r->stop[i].n) + r->stop[i].n;
	size_t packed = 0;
	for (size_t i = 0; i < r->nids; i++)
		packed += pw_varint_len(r->ids[i]);
	struct pw_out o = {out + FRAME_HEAD, 0, cap - FRAME_HEAD, 0};
	pw_put_bytes(&o, REQ_ID, r->rid.p, r->rid.n);
	pw_put_tag(&o, REQ_TOKENIZED, PW_LEN);
	pw_put_varint(&o, 1 + pw_varint_len(packed) + packed);
	pw_put_tag(&o, TOK_INPUT_IDS, PW_LEN);
	pw_put_varint(&o, packed);
	for (size_t i = 0; i < r->nids; i++)
		pw_put_varint(&o, r->ids[i]);
	pw_put_tag(&o, REQ_SAMPLING, PW_LEN);
	pw_put_varint(&o, s.len + stop_len);
	if (!o.err && !s.err && o.cap - o.len >= s.len) {
		memcpy(o.p + o.len, sp, s.len);
		o.len += s.len;
	} else {
		o.err = 1;
	}
	for (size_t i = 0; i < r->nstop; i++)
		pw_put_bytes(&o, dialects[r->dialect].stop, r->stop[i].p, r->stop[i].n);
	if (r->stream)
		pw_put_uint(&o, dialects[r->dialect].stream, 1);
	if (o.err || o.len > UINT32_MAX)
		return -ENOSPC;
	out[0] = 0;
	for (int i = 0; i < 4; i++)
		out[1 + i] = (uint8_t)(o.len >> (8 * (3 - i)));
	return (long)(o.len + FRAME_HEAD);
}

/* A count field: a varint, kept. */
static int count(const struct pw_field *f, uint64_t *v)
{
	if (f->type != PW_VARINT)
		return -1;
	*v = f->v;
	return 0;
}

static int str(const struct pw_field *f, struct engine_str *s)
{
	if (f->type != PW_LEN)
		return -1;
	s->p = (const char *)f->p;
	s->n = f->n;
	return 0;
}

/* The token ids of field <f> counted (and checked: each a varint of at most 32 bits). */
static int ids_count(const struct pw_field *f, uint64_t *n)
{
	if (f->type == PW_VARINT) {
		if (f->v > UINT32_MAX)
			return -1;
		(*n)++;
		return 0;
	}
	if (f->type != PW_LEN)
		return -1;
	size_t at = 0;
	while (at < f->n) {
		uint64_t v;
		if (pw_get_varint(f->p, f->n, &at, &v) < 0 || v > UINT32_MAX)
			return -1;
		(*n)++;
	}
	return 0;
}

static int read_inner(const uint8_t *p, size_t n, struct engine_resp *r)
{
	struct pw_in in;
	struct pw_field f;
	int k, bad = 0;
	pw_in_init(&in, p, n);
	while (!bad && (k = pw_next(&in, &f)) > 0) {
		if (r->kind == ENGINE_ERROR) {
			if (f.num == ERR_MESSAGE)
				bad = str(&f, &r->message);
			else if (f.num == ERR_HTTP_STATUS)
				bad = str(&f, &r->http_status);
			continue;
		}
		int done = r->kind == ENGINE_COMPLETE;
		if (f.num == IDS) {
			bad = ids_count(&f, &r->nids);
		} else if (f.num == (done ? DONE_PROMPT : CHUNK_PROMPT)) {
			bad = count(&f, &r->prompt_tokens);
			r->has_prompt = 1;
		} else if (f.num == (done ? DONE_COMPLETION : CHUNK_COMPLETION)) {
			bad = count(&f, &r->completion_tokens);
			r->has_completion = 1;
		} else if (f.num == (done ? DONE_CACHED : CHUNK_CACHED)) {
			bad = count(&f, &r->cached_tokens);
			r->has_cached = 1;
		} else if (done && f.num == DONE_FINISH) {
			bad = str(&f, &r->finish);
		}
	}
	return bad || k < 0 ? -1 : 0;
}

int engine_pb_read(const uint8_t *p, size_t n, struct engine_resp *r)
{
	memset(r, 0, sizeof(*r));
	struct pw_in in;
	struct pw_field f;
	int k;
	pw_in_init(&in, p, n);
	while ((k = pw_next(&in, &f)) > 0) {
		if (f.num < ENGINE_CHUNK || f.num > ENGINE_ERROR)
			continue; /* request_id, and what we do not read */
		if (f.type != PW_LEN)
			goto bad;
		/* a oneof: the last one given wins, as in every protobuf reader */
		memset(r, 0, sizeof(*r));
		r->kind = (enum engine_kind)f.num;
		r->body = f.p;
		r->body_len = f.n;
		if (read_inner(f.p, f.n, r) < 0)
			goto bad;
	}
	if (k < 0)
		goto bad;
	return 0;
bad:
	memset(r, 0, sizeof(*r));
	return -EBADMSG;
}

int engine_pb_next_id(const struct engine_resp *r, struct engine_idpos *pos, uint32_t *id)
{
	if (r->kind != ENGINE_CHUNK && r->kind != ENGINE_COMPLETE)
		return 0;
	for (;;) {
		uint64_t v;
		if (pos->pat < pos->pend) {
			if (pw_get_varint(r->body, pos->pend, &pos->pat, &v) < 0)
				return 0; /* engine_pb_read() checked it: never */
			*id = (uint32_t)v;
			return 1;
		}
		if (pos->at >= r->body_len)
			return 0;
		struct pw_in in;
		struct pw_field f;
		pw_in_init(&in, r->body + pos->at, r->body_len - pos->at);
		if (pw_next(&in, &f) <= 0)
			return 0;
		pos->at = (size_t)(in.p - r->body);
		if (f.num != IDS)
			continue;
		if (f.type == PW_VARINT) {
			*id = (uint32_t)f.v;
			return 1;
		}
		pos->pat = (size_t)(f.p - r->body);
		pos->pend = pos->pat + f.n;
	}
}
