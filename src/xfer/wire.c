/*
 * wire.c - encoding and checked decoding of xfer frames and metas (see wire.h for the layout).
 * Decoders never trust a length: each read is preceded by a check of what is left.
 */
#include "xfer/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void xfer_hdr_encode(uint8_t out[XFER_HDR_LEN], uint8_t type, uint32_t meta_len, uint32_t data_len)
{
	wire_put32(out, XFER_MAGIC);
	out[4] = type;
	out[5] = 0;
	out[6] = out[7] = 0;
	wire_put32(out + 8, meta_len);
	wire_put32(out + 12, data_len);
}

int xfer_hdr_decode(const uint8_t in[XFER_HDR_LEN], struct xfer_hdr *out)
{
	if (wire_get32(in) != XFER_MAGIC)
		return -EPROTO;
	out->type = in[4];
	out->flags = in[5];
	out->meta_len = wire_get32(in + 8);
	out->data_len = wire_get32(in + 12);
	if (out->type == 0 || out->type >= XFER_TYPE_MAX)
		return -EPROTO;
	if (out->meta_len > XFER_META_MAX || out->data_len > XFER_DATA_MAX)
		return -EPROTO;
	if (out->data_len && out->type != XFER_CHUNK && out->type != XFER_BATCH)
		return -EPROTO;
	return 0;
}

size_t xfer_hello_encode(uint8_t *out, const struct xfer_hello *h)
{
	wire_put32(out, h->version);
	out[4] = h->role;
	memcpy(out + 5, h->session, XFER_SESSION_LEN);
	memcpy(out + 5 + XFER_SESSION_LEN, h->mac, XFER_MAC_LEN);
	return XFER_HELLO_LEN;
}

int xfer_hello_decode(const uint8_t *in, size_t len, struct xfer_hello *out)
{
	if (len != XFER_HELLO_LEN)
		return -EPROTO;
	out->version = wire_get32(in);
	out->role = in[4];
	memcpy(out->session, in + 5, XFER_SESSION_LEN);
	memcpy(out->mac, in + 5 + XFER_SESSION_LEN, XFER_MAC_LEN);
	if (out->role != XFER_ROLE_DATA && out->role != XFER_ROLE_PULL)
		return -EPROTO;
	return 0;
}

size_t xfer_chunk_encode(uint8_t *out, const struct xfer_chunk_meta *c)
{
	wire_put32(out, c->file);
	wire_put32(out + 4, c->chunk);
	wire_put64(out + 8, c->hash);
	return XFER_CHUNK_LEN;
}

int xfer_chunk_decode(const uint8_t *in, size_t len, struct xfer_chunk_meta *out)
{
	if (len != XFER_CHUNK_LEN)
		return -EPROTO;
	out->file = wire_get32(in);
	out->chunk = wire_get32(in + 4);
	out->hash = wire_get64(in + 8);
	return 0;
}

size_t xfer_ack_encode(uint8_t *out, const struct xfer_ack *a)
{
	wire_put32(out, a->file);
	wire_put32(out + 4, a->chunk);
	out[8] = a->status;
	return XFER_ACK_LEN;
}

int xfer_ack_decode(const uint8_t *in, size_t len, struct xfer_ack *out)
{
	if (len != XFER_ACK_LEN)
		return -EPROTO;
	out->file = wire_get32(in);
	out->chunk = wire_get32(in + 4);
	out->status = in[8];
	if (out->status > XFER_ACK_IO)
		return -EPROTO;
	return 0;
}

size_t xfer_batch_encode(uint8_t *out, const struct xfer_batch *b)
{
	wire_put32(out, b->count);
	uint8_t *p = out + 4;
	for (uint32_t i = 0; i < b->count; i++, p += XFER_BATCH_ENTRY) {
		wire_put32(p, b->f[i].file);
		wire_put32(p + 4, b->f[i].len);
		wire_put64(p + 8, b->f[i].hash);
	}
	return (size_t)(p - out);
}

int xfer_batch_decode(const uint8_t *in, size_t len, uint32_t data_len, struct xfer_batch *out,
		      const char **why)
{
	*why = "batch is truncated";
	if (len < 4)
		return -EPROTO;
	if (data_len > XFER_BATCH_BYTES) {
		*why = "batch is larger than XFER_BATCH_BYTES (1 MiB)";
		return -EPROTO;
	}
	uint32_t n = wire_get32(in);
	if (n == 0 || n > XFER_BATCH_FILES) {
		*why = "batch has no file or too many";
		return -EPROTO;
	}
	if (len != 4 + (size_t)n * XFER_BATCH_ENTRY) {
		*why = "batch's file count does not match its length";
		return -EPROTO;
	}
	uint64_t total = 0;
	const uint8_t *p = in + 4;
	for (uint32_t i = 0; i < n; i++, p += XFER_BATCH_ENTRY) {
		struct xfer_batch_file *f = &out->f[i];
		f->file = wire_get32(p);
		f->len = wire_get32(p + 4);
		f->hash = wire_get64(p + 8);
		if (i && f->file <= out->f[i - 1].file) {
			*why = "batch's files are out of order or named twice";
			return -EPROTO;
		}
		if (f->len == 0 || f->len > XFER_BATCH_FILE_MAX) {
			*why = "a batched file is empty or too large";
			return -EPROTO;
		}
		total += f->len;
	}
	if (total != data_len) {
		*why = "batch's lengths do not add up to its data";
		return -EPROTO;
	}
	out->count = n;
	return 0;
}

size_t xfer_batch_ack_encode(uint8_t *out, const struct xfer_batch *b)
{
	wire_put32(out, b->count);
	uint8_t *p = out + 4;
	for (uint32_t i = 0; i < b->count; i++, p += 5) {
		wire_put32(p, b->f[i].file);
		p[4] = b->status[i];
	}
	return (size_t)(p - out);
}

int xfer_batch_ack_decode(const uint8_t *in, size_t len, struct xfer_batch *b)
{
	if (len < 4 || wire_get32(in) != b->count || len != 4 + (size_t)b->count * 5)
		return -EPROTO;
	const uint8_t *p = in + 4;
	for (uint32_t i = 0; i < b->count; i++, p += 5) {
		if (wire_get32(p) != b->f[i].file || p[4] > XFER_ACK_IO)
			return -EPROTO;
		b->status[i] = p[4];
	}
	return 0;
}

int xfer_path_check(const char *path, size_t len, const char **why)
{
	if (len == 0 || len > XFER_PATH_MAX) {
		*why = "path is empty or too long";
		return -EINVAL;
	}
	if (path[0] == '/') {
		*why = "path is absolute";
		return -EINVAL;
	}
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len) {
			unsigned char c = (unsigned char)path[i];
			if (c < 0x20 || c == 0x7f || c == '\\') {
				*why = "path has a control character or a backslash";
				return -EINVAL;
			}
			if (c != '/')
				continue;
		}
		size_t n = i - start;
		if (n == 0 || (n == 1 && path[start] == '.') ||
		    (n == 2 && path[start] == '.' && path[start + 1] == '.')) {
			*why = "path has an empty, '.' or '..' component";
			return -EINVAL;
		}
		if (start == 0 && n == sizeof(XFER_STATE_DIR) - 1 &&
		    !memcmp(path, XFER_STATE_DIR, n)) {
			*why = "path is inside the receiver's directory of partial files";
			return -EINVAL;
		}
		start = i + 1;
	}
	return 0;
}

/* A cursor over bytes being decoded; any short read marks it failed. */
struct rd {
	const uint8_t *p;
	size_t left;
	int bad;
};

static const uint8_t *rd_take(struct rd *r, size_t n)
{
	if (r->bad || r->left < n) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}

static uint32_t rd_u32(struct rd *r)
{
	const uint8_t *p = rd_take(r, 4);
	return p ? wire_get32(p) : 0;
}

static uint64_t rd_u64(struct rd *r)
{
	const uint8_t *p = rd_take(r, 8);
	return p ? wire_get64(p) : 0;
}

static char *rd_str(struct rd *r, size_t max)
{
	const uint8_t *p = rd_take(r, 2);
	if (!p)
		return NULL;
	size_t n = (size_t)p[0] | (size_t)p[1] << 8;
	if (n > max || !(p = rd_take(r, n))) {
		r->bad = 1;
		return NULL;
	}
	char *s = malloc(n + 1);
	if (!s) {
		r->bad = 1;
		return NULL;
	}
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

void xfer_manifest_free(struct xfer_manifest *m)
{
	for (uint32_t i = 0; m->files && i < m->nfiles; i++) {
		free(m->files[i].path);
	}
	free(m->files);
	for (uint32_t i = 0; i < m->nfwd; i++)
		free(m->fwd[i]);
	memset(m, 0, sizeof(*m));
}

int xfer_manifest_decode(const uint8_t *in, size_t len, uint32_t max_files,
			 struct xfer_manifest *out, const char **why)
{
	struct rd r = {in, len, 0};
	uint64_t total = 0;
	memset(out, 0, sizeof(*out));
	*why = "manifest is truncated";
	out->chunk_size = rd_u32(&r);
	uint32_t nfiles = rd_u32(&r);
	uint32_t nfwd = rd_u32(&r);
	if (r.bad)
		goto fail;
	if (out->chunk_size < 4096 || out->chunk_size > XFER_DATA_MAX) {
		*why = "chunk size out of range";
		goto fail;
	}
	if (nfiles > max_files) {
		*why = "too many files in one transfer";
		memset(out, 0, sizeof(*out));
		return -E2BIG;
	}
	if (nfwd > XFER_FWD_MAX) {
		*why = "too many bcast hops";
		goto fail;
	}
	/* every file needs at least 23 bytes: a bound that stops huge allocations early */
	if (nfiles > r.left / 23) {
		*why = "file count does not match the manifest's length";
		goto fail;
	}
	for (; out->nfwd < nfwd; out->nfwd++)
		if (!(out->fwd[out->nfwd] = rd_str(&r, 1024)))
			goto fail;
	out->files = calloc(nfiles ? nfiles : 1, sizeof(*out->files));
	if (!out->files) {
		*why = "out of memory";
		goto fail;
	}
	for (; out->nfiles < nfiles; out->nfiles++) {
		struct xfer_file *f = &out->files[out->nfiles];
		if (!(f->path = rd_str(&r, XFER_PATH_MAX)))
			goto fail;
		if (xfer_path_check(f->path, strlen(f->path), why))
			goto fail;
		f->size = rd_u64(&r);
		f->mode = rd_u32(&r) & 07777;
		f->mtime_ns = rd_u64(&r);
		uint64_t n = f->size ? (f->size - 1) / out->chunk_size + 1 : 0;
		total += n; /* n < 2^53 (size / 4096): no wrap */
		if (total > XFER_CHUNKS_MAX) {
			*why = "more than 2^31 chunks in one transfer (a larger chunk size needs "
			       "fewer)";
			goto fail;
		}
		f->nchunks = (uint32_t)n;
	}
	const uint8_t *last = rd_take(&r, 1);
	out->last = last ? *last : 0;
	if (out->last > 1) {
		*why = "manifest part's last flag is neither 0 nor 1";
		goto fail;
	}
	if (out->last) {
		out->total_files = rd_u32(&r);
		out->total_bytes = rd_u64(&r);
	}
	if (r.bad)
		goto fail;
	if (r.left) {
		*why = "trailing bytes after the manifest";
		goto fail;
	}
	return 0;
fail:
	/* a file whose path was read counts, so free sees its allocations */
	if (out->files && out->nfiles < nfiles && out->files[out->nfiles].path)
		out->nfiles++;
	xfer_manifest_free(out);
	return -EPROTO;
}

static uint8_t *put_str(uint8_t *p, const char *s)
{
	size_t n = strlen(s);
	p[0] = (uint8_t)n, p[1] = (uint8_t)(n >> 8);
	memcpy(p + 2, s, n);
	return p + 2 + n;
}

int xfer_manifest_encode(const struct xfer_manifest *m, uint8_t **out, size_t *len)
{
	size_t n = 12;
	for (uint32_t i = 0; i < m->nfwd; i++)
		n += 2 + strlen(m->fwd[i]);
	for (uint32_t i = 0; i < m->nfiles; i++)
		n += 2 + strlen(m->files[i].path) + 8 + 4 + 8;
	n += m->last ? 1 + 4 + 8 : 1;
	if (n > XFER_META_MAX)
		return -E2BIG;
	uint8_t *b = malloc(n), *p = b;
	if (!b)
		return -ENOMEM;
	wire_put32(p, m->chunk_size);
	wire_put32(p + 4, m->nfiles);
	wire_put32(p + 8, m->nfwd);
	p += 12;
	for (uint32_t i = 0; i < m->nfwd; i++)
		p = put_str(p, m->fwd[i]);
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct xfer_file *f = &m->files[i];
		p = put_str(p, f->path);
		wire_put64(p, f->size);
		wire_put32(p + 8, f->mode);
		wire_put64(p + 12, f->mtime_ns);
		p += 20;
	}
	*p++ = m->last ? 1 : 0;
	if (m->last) {
		wire_put32(p, m->total_files);
		wire_put64(p + 4, m->total_bytes);
	}
	*out = b;
	*len = n;
	return 0;
}

size_t xfer_need_len(const struct xfer_manifest *m)
{
	size_t n = 0;
	for (uint32_t i = 0; i < m->nfiles; i++)
		n += (m->files[i].nchunks + 7) / 8;
	return n;
}

int xfer_names_encode(const char *const *names, unsigned n, uint8_t **out, size_t *len)
{
	size_t total = 4;
	for (unsigned i = 0; i < n; i++) {
		size_t l = strlen(names[i]);
		if (l > XFER_PATH_MAX)
			return -ENAMETOOLONG;
		total += 2 + l;
	}
	if (total > XFER_META_MAX)
		return -E2BIG;
	uint8_t *b = malloc(total), *p = b + 4;
	if (!b)
		return -ENOMEM;
	wire_put32(b, n);
	for (unsigned i = 0; i < n; i++)
		p = put_str(p, names[i]);
	*out = b;
	*len = total;
	return 0;
}

int xfer_names_decode(const uint8_t *in, size_t len, char ***names, unsigned *n, const char **why)
{
	struct rd r = {in, len, 0};
	uint32_t count = rd_u32(&r);
	*why = "name list is truncated";
	if (r.bad || count == 0 || count > r.left / 3) {
		*why = "name list is empty or does not match its length";
		return -EPROTO;
	}
	/* one block: the pointer array, then the strings */
	char **v = malloc(count * sizeof(char *) + len);
	if (!v) {
		*why = "out of memory";
		return -ENOMEM;
	}
	char *s = (char *)(v + count);
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *p = rd_take(&r, 2);
		size_t l = p ? (size_t)p[0] | (size_t)p[1] << 8 : 0;
		const uint8_t *str = p ? rd_take(&r, l) : NULL;
		if (!str) {
			free(v);
			return -EPROTO;
		}
		memcpy(s, str, l);
		s[l] = 0;
		if (xfer_path_check(s, l, why)) {
			free(v);
			return -EPROTO;
		}
		v[i] = s;
		s += l + 1;
	}
	if (r.left) {
		*why = "trailing bytes after the name list";
		free(v);
		return -EPROTO;
	}
	*names = v;
	*n = count;
	return 0;
}

int xfer_ok_decode(const uint8_t *in, size_t len, uint8_t proof[XFER_MAC_LEN], int *has)
{
	*has = 0;
	if (len == 0)
		return 0;
	if (len != XFER_MAC_LEN)
		return -EPROTO;
	memcpy(proof, in, XFER_MAC_LEN);
	*has = 1;
	return 0;
}

int xfer_name_asked(const char *path, const char *const *names, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		const char *base = strrchr(names[i], '/') ? strrchr(names[i], '/') + 1 : names[i];
		size_t len = strlen(base);
		if (len && !strncmp(path, base, len) && (path[len] == 0 || path[len] == '/'))
			return 1;
	}
	return 0;
}

int xfer_get_encode(uint32_t nconns, const char *const *names, unsigned n, uint8_t **out,
		    size_t *len)
{
	uint8_t *enc;
	size_t enclen;
	int rc = xfer_names_encode(names, n, &enc, &enclen);
	if (rc)
		return rc;
	*out = malloc(enclen + 4);
	if (!*out) {
		free(enc);
		return -ENOMEM;
	}
	wire_put32(*out, nconns);
	memcpy(*out + 4, enc, enclen);
	*len = enclen + 4;
	free(enc);
	return 0;
}

int xfer_get_decode(const uint8_t *in, size_t len, uint32_t *nconns, char ***names, unsigned *n,
		    const char **why)
{
	if (len < 4) {
		*why = "GET too short";
		return -EPROTO;
	}
	*nconns = wire_get32(in);
	return xfer_names_decode(in + 4, len - 4, names, n, why);
}

void xfer_magic_encode(uint8_t out[4])
{
	wire_put32(out, XFER_MAGIC);
}

int xfer_magic_decode(const uint8_t in[4])
{
	return wire_get32(in) == XFER_MAGIC ? 0 : -EPROTO;
}

int xfer_challenge_decode(const uint8_t *in, size_t len, uint8_t nonce[XFER_NONCE_LEN])
{
	if (len != XFER_NONCE_LEN)
		return -EPROTO;
	memcpy(nonce, in, XFER_NONCE_LEN);
	return 0;
}

size_t xfer_ok_encode(uint8_t *out, const uint8_t *proof)
{
	if (!proof)
		return 0;
	memcpy(out, proof, XFER_MAC_LEN);
	return XFER_MAC_LEN;
}

size_t xfer_err_decode(const uint8_t *in, size_t len, char *text, size_t cap)
{
	size_t n = len < cap - 1 ? len : cap - 1;
	memcpy(text, in, n);
	text[n] = 0;
	return n;
}

int xfer_need_encode(const struct xfer_manifest *m, const uint8_t *needed, uint8_t **out,
		     size_t *len)
{
	*len = xfer_need_len(m);
	uint8_t *p = *out = calloc(*len ? *len : 1, 1);
	if (!p)
		return -ENOMEM;
	for (uint32_t f = 0; f < m->nfiles; f++) {
		uint32_t n = m->files[f].nchunks;
		for (uint32_t k = 0; k < n; k++)
			if (needed[k])
				p[k / 8] |= (uint8_t)(1u << (k % 8));
		needed += n;
		p += (n + 7) / 8;
	}
	return 0;
}

int xfer_need_decode(const uint8_t *in, size_t len, const struct xfer_manifest *m, uint8_t *needed)
{
	if (len != xfer_need_len(m))
		return -EPROTO;
	for (uint32_t f = 0; f < m->nfiles; f++) {
		uint32_t n = m->files[f].nchunks;
		for (uint32_t k = 0; k < n; k++)
			needed[k] = (in[k / 8] >> (k % 8)) & 1;
		needed += n;
		in += (n + 7) / 8;
	}
	return 0;
}

int xfer_finish_decode(const uint8_t *in, size_t len, uint32_t nfiles, const uint8_t **hashes)
{
	if (len != (size_t)nfiles * XFER_WHOLE_HASH_LEN)
		return -EPROTO;
	*hashes = in;
	return 0;
}

size_t xfer_region_encode(uint8_t *out, const struct xfer_region *r)
{
	wire_put64(out, r->key);
	wire_put64(out + 8, r->len);
	wire_put32(out + 16, r->pid);
	wire_put32(out + 20, r->fd);
	return XFER_REGION_LEN;
}

int xfer_region_decode(const uint8_t *in, size_t len, struct xfer_region *out)
{
	if (len != XFER_REGION_LEN)
		return -EPROTO;
	out->key = wire_get64(in);
	out->len = wire_get64(in + 8);
	out->pid = wire_get32(in + 16);
	out->fd = wire_get32(in + 20);
	return 0;
}

size_t xfer_written_encode(uint8_t *out, const struct xfer_chunk_meta *c, uint64_t off)
{
	xfer_chunk_encode(out, c);
	wire_put64(out + XFER_CHUNK_LEN, off);
	return XFER_WRITTEN_LEN;
}

int xfer_written_decode(const uint8_t *in, size_t len, struct xfer_chunk_meta *c, uint64_t *off)
{
	if (len != XFER_WRITTEN_LEN || xfer_chunk_decode(in, XFER_CHUNK_LEN, c))
		return -EPROTO;
	*off = wire_get64(in + XFER_CHUNK_LEN);
	return 0;
}
