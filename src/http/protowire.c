/*
 * protowire.c - the Protocol Buffers wire format (see protowire.h).
 */
#include "http/protowire.h"

#include <string.h>

size_t pw_varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void pw_put_varint(struct pw_out *o, uint64_t v)
{
	if (o->err || o->cap - o->len < pw_varint_len(v)) {
		o->err = 1;
		return;
	}
	while (v >= 0x80) {
		o->p[o->len++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	o->p[o->len++] = (uint8_t)v;
}

void pw_put_tag(struct pw_out *o, uint32_t field, enum pw_type t)
{
	pw_put_varint(o, (uint64_t)field << 3 | (uint64_t)t);
}

void pw_put_uint(struct pw_out *o, uint32_t field, uint64_t v)
{
	pw_put_tag(o, field, PW_VARINT);
	pw_put_varint(o, v);
}

void pw_put_float(struct pw_out *o, uint32_t field, float f)
{
	uint32_t bits;
	memcpy(&bits, &f, 4);
	pw_put_tag(o, field, PW_I32);
	if (o->err || o->cap - o->len < 4) {
		o->err = 1;
		return;
	}
	for (int i = 0; i < 4; i++)
		o->p[o->len++] = (uint8_t)(bits >> (8 * i));
}

void pw_put_bytes(struct pw_out *o, uint32_t field, const void *p, size_t n)
{
	pw_put_tag(o, field, PW_LEN);
	pw_put_varint(o, n);
	if (o->err || o->cap - o->len < n) {
		o->err = 1;
		return;
	}
	if (n)
		memcpy(o->p + o->len, p, n);
	o->len += n;
}

int pw_get_varint(const uint8_t *p, size_t n, size_t *at, uint64_t *v)
{
	uint64_t r = 0;
	for (unsigned i = 0; i < 10; i++) {
		if (*at >= n)
			return -1;
		uint8_t b = p[(*at)++];
		r |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return -1;
}

int pw_next(struct pw_in *in, struct pw_field *f)
{
	if (in->p >= in->end)
		return 0;
	size_t n = (size_t)(in->end - in->p), at = 0;
	uint64_t tag;
	if (pw_get_varint(in->p, n, &at, &tag) < 0 || tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
		goto bad;
	f->num = (uint32_t)(tag >> 3);
	f->type = (enum pw_type)(tag & 7);
	f->v = 0;
	f->p = NULL;
	f->n = 0;
	switch (f->type) {
	case PW_VARINT:
		if (pw_get_varint(in->p, n, &at, &f->v) < 0)
			goto bad;
		break;
	case PW_I64:
	case PW_I32: {
		size_t k = f->type == PW_I64 ? 8 : 4;
		if (n - at < k)
			goto bad;
		for (size_t i = 0; i < k; i++)
			f->v |= (uint64_t)in->p[at + i] << (8 * i);
		at += k;
		break;
	}
	case PW_LEN: {
		uint64_t len;
		if (pw_get_varint(in->p, n, &at, &len) < 0 || len > n - at)
			goto bad;
		f->p = in->p + at;
		f->n = (size_t)len;
		at += (size_t)len;
		break;
	}
	default:
		goto bad;
	}
	in->p += at;
	return 1;
bad:
	in->p = in->end;
	return -1;
}
