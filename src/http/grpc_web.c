/*
 * grpc_web.c - gRPC-Web's text mode: streamed base64 both ways (see grpc_web.h).
 */
#include "http/grpc_web.h"
#include "core/b64digit.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int value(unsigned char c)
{
	return b64_digit(c, '+', '/');
}

static long refuse(struct grpc_web_dec *d, const char *why)
{
	if (!d->why)
		d->why = why;
	return -1;
}

/* The quantum d->q, whole, into out (room for 3): how many bytes, or -1. */
static int quantum(struct grpc_web_dec *d, char *out)
{
	int v[4], pad = 0;
	for (int i = 0; i < 4; i++) {
		if (d->q[i] == '=') {
			if (i < 2)
				return (int)refuse(d, "the body's base64 has '=' where no padding "
						      "may be");
			pad++;
			v[i] = 0;
			continue;
		}
		if (pad)
			return (int)refuse(d, "the body's base64 has data after its padding "
					      "inside a quantum");
		v[i] = value((unsigned char)d->q[i]);
	}
	unsigned bits =
	    (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
	out[0] = (char)(bits >> 16);
	if (pad < 2)
		out[1] = (char)(bits >> 8);
	if (pad < 1)
		out[2] = (char)bits;
	return 3 - pad;
}

long grpc_web_decode(struct grpc_web_dec *d, const char *in, size_t len, size_t *used, char *out,
		     size_t cap)
{
	size_t i = 0, o = 0;
	*used = 0;
	if (d->why)
		return -1;
	for (; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c != '=' && value(c) < 0)
			return refuse(d, c == ' ' || c == '\t' || c == '\r' || c == '\n'
					     ? "the body's base64 has whitespace in it"
					     : "the body is not base64 (a character outside "
					       "A-Z a-z 0-9 + / =)");
		if (d->n == 3 && cap - o < 3)
			break; /* the quantum this completes waits for room */
		d->q[d->n++] = (char)c;
		if (d->n < 4)
			continue;
		int k = quantum(d, out + o);
		if (k < 0)
			return -1;
		o += (size_t)k;
		d->n = 0;
	}
	*used = i;
	d->decoded += o;
	return (long)o;
}

int grpc_web_decode_end(struct grpc_web_dec *d)
{
	if (d->why)
		return -1;
	if (d->n)
		return (int)refuse(d, "the body's base64 ends inside a quantum (its length is not "
				      "a multiple of 4)");
	return 0;
}

/* One quantum of 1 to 3 bytes b[0..n) (padded when short) into out: 4. */
static size_t put_quantum(const unsigned char *b, size_t n, char *out)
{
	unsigned bits =
	    (unsigned)b[0] << 16 | (n > 1 ? (unsigned)b[1] << 8 : 0) | (n > 2 ? (unsigned)b[2] : 0);
	out[0] = alphabet[bits >> 18 & 63];
	out[1] = alphabet[bits >> 12 & 63];
	out[2] = n > 1 ? alphabet[bits >> 6 & 63] : '=';
	out[3] = n > 2 ? alphabet[bits & 63] : '=';
	return 4;
}

size_t grpc_web_b64(const unsigned char *in, size_t len, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i += 3)
		o += put_quantum(in + i, len - i < 3 ? len - i : 3, out + o);
	return o;
}

/* in[0..len) joins the run: whole quanta out, the rest carried. */
static size_t run(struct grpc_web_enc *e, const unsigned char *in, size_t len, char *out)
{
	size_t o = 0, i = 0;
	if (e->ncarry) { /* the carried bytes first */
		unsigned char q[3] = {e->carry[0], e->carry[1], 0};
		size_t n = e->ncarry;
		while (n < 3 && i < len)
			q[n++] = in[i++];
		if (n < 3) {
			e->carry[1] = q[1];
			e->ncarry = (uint8_t)n;
			return 0;
		}
		o += put_quantum(q, 3, out);
		e->ncarry = 0;
	}
	size_t whole = (len - i) / 3 * 3;
	o += grpc_web_b64(in + i, whole, out + o);
	i += whole;
	for (; i < len; i++)
		e->carry[e->ncarry++] = in[i];
	return o;
}

size_t grpc_web_encode_flush(struct grpc_web_enc *e, char *out)
{
	size_t n = e->ncarry;
	e->ncarry = 0;
	return n ? put_quantum(e->carry, n, out) : 0;
}

size_t grpc_web_encode(struct grpc_web_enc *e, const unsigned char *in, size_t len, char *out)
{
	size_t o = 0, i = 0;
	while (i < len) {
		size_t k;
		if (e->hdr < 5) { /* the message's prefix: its flag, then its length */
			k = 5u - e->hdr;
			k = k < len - i ? k : len - i;
			for (size_t j = 0; j < k; j++, e->hdr++)
				if (e->hdr)
					e->left = e->left << 8 | in[i + j];
		} else {
			k = e->left < len - i ? e->left : len - i;
			e->left -= (uint32_t)k;
		}
		o += run(e, in + i, k, out + o);
		i += k;
		if (e->hdr == 5 && !e->left) { /* a message's end: padded, a new run */
			o += grpc_web_encode_flush(e, out + o);
			e->hdr = 0;
		}
	}
	return o;
}
