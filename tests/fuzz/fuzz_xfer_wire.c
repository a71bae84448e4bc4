/*
 * fuzz_xfer_wire.c - libFuzzer target: the xfer wire parsers on any bytes (a frame header,
 * then the rest as every kind of meta: HELLO, CHUNK, ACK, OK, CHALLENGE, ERR, GET and its name
 * list, FINISH, the plain preamble, MANIFEST, NEED against a manifest that decodes, BATCH
 * with a data length from the input, BATCH_ACK against the batch, and the loopback stand-in's
 * REGION and WRITTEN, which must encode back to themselves). A manifest that decodes
 * must encode back to the same bytes, a BATCH that decodes too, with its lengths adding up, every
 * path in it and every name of a GET must pass the path check, and a NEED that decodes must encode
 * back to itself.
 */
#include "xfer/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* NEED against manifest <m>: the same bytes (the manifest's own) decoded as a bitmap, and
 * one that decodes must encode back to itself. */
static void fuzz_need(const struct xfer_manifest *m, const uint8_t *data, size_t size)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < m->nfiles; i++)
		total += m->files[i].nchunks;
	size_t len = xfer_need_len(m);
	if (total > (1u << 20) || len > size)
		return;
	uint8_t *needed = malloc(total ? total : 1), *enc;
	size_t elen;
	if (!needed)
		return;
	if (xfer_need_decode(data, len, m, needed) == 0 &&
	    xfer_need_encode(m, needed, &enc, &elen) == 0) {
		/* bits past a file's last chunk are dropped: compare after a second trip */
		uint8_t *enc2;
		size_t elen2;
		if (xfer_need_decode(enc, elen, m, needed) ||
		    xfer_need_encode(m, needed, &enc2, &elen2) || elen2 != elen ||
		    memcmp(enc, enc2, elen))
			abort();
		free(enc2);
		free(enc);
	}
	free(needed);
}

/* BATCH: the first 4 bytes say the data length, the rest is the meta; one that decodes must
 * encode back to itself and be in order within the limits; then BATCH_ACK against it. */
static void fuzz_batch(const uint8_t *data, size_t size)
{
	static struct xfer_batch b;
	static uint8_t enc[XFER_BATCH_META_MAX];
	const char *why;
	if (size < 4)
		return;
	uint32_t dlen = wire_get32(data);
	if (xfer_batch_decode(data + 4, size - 4, dlen, &b, &why) == 0) {
		uint64_t total = 0;
		for (uint32_t i = 0; i < b.count; i++) {
			if ((i && b.f[i].file <= b.f[i - 1].file) || !b.f[i].len ||
			    b.f[i].len > XFER_BATCH_FILE_MAX)
				abort();
			total += b.f[i].len;
		}
		if (total != dlen || dlen > XFER_BATCH_BYTES || b.count > XFER_BATCH_FILES ||
		    xfer_batch_encode(enc, &b) != size - 4 || memcmp(enc, data + 4, size - 4))
			abort();
		(void)xfer_batch_ack_decode(data + 4, size - 4, &b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_batch(data, size);
	struct xfer_hdr h;
	if (size >= XFER_HDR_LEN)
		(void)xfer_hdr_decode(data, &h);
	struct xfer_hello hello;
	struct xfer_chunk_meta cm;
	struct xfer_ack ack;
	(void)xfer_hello_decode(data, size, &hello);
	(void)xfer_chunk_decode(data, size, &cm);
	(void)xfer_ack_decode(data, size, &ack);
	/* the loopback stand-in's REGION and WRITTEN round-trip */
	struct xfer_region rg;
	uint8_t renc[XFER_REGION_LEN > XFER_WRITTEN_LEN ? XFER_REGION_LEN : XFER_WRITTEN_LEN];
	if (xfer_region_decode(data, size, &rg) == 0 &&
	    (xfer_region_encode(renc, &rg) != size || memcmp(renc, data, size)))
		abort();
	uint64_t roff;
	if (xfer_written_decode(data, size, &cm, &roff) == 0 &&
	    (xfer_written_encode(renc, &cm, roff) != size || memcmp(renc, data, size)))
		abort();
	uint8_t proof[XFER_MAC_LEN];
	int has;
	if (xfer_ok_decode(data, size, proof, &has) == 0 && has != (size != 0))
		abort();
	uint8_t nonce[XFER_NONCE_LEN];
	(void)xfer_challenge_decode(data, size, nonce);
	char text[256];
	if (xfer_err_decode(data, size, text, sizeof(text)) >= sizeof(text))
		abort();
	if (size >= 4)
		(void)xfer_magic_decode(data);
	const uint8_t *hashes;
	if (xfer_finish_decode(data, size, (uint32_t)(size / XFER_WHOLE_HASH_LEN), &hashes) == 0 &&
	    hashes != data)
		abort();
	const char *why;
	(void)xfer_path_check((const char *)data, size, &why);
	uint32_t nconns;
	char **gnames;
	unsigned ngnames;
	if (xfer_get_decode(data, size, &nconns, &gnames, &ngnames, &why) == 0) {
		for (unsigned i = 0; i < ngnames; i++)
			if (xfer_path_check(gnames[i], strlen(gnames[i]), &why))
				abort();
		free(gnames);
	}
	char **names;
	unsigned nnames;
	if (xfer_names_decode(data, size, &names, &nnames, &why) == 0) {
		for (unsigned i = 0; i < nnames; i++)
			if (xfer_path_check(names[i], strlen(names[i]), &why))
				abort();
		free(names);
	}
	struct xfer_manifest m;
	if (xfer_manifest_decode(data, size, UINT32_MAX, &m, &why) == 0) {
		for (uint32_t i = 0; i < m.nfiles; i++)
			if (xfer_path_check(m.files[i].path, strlen(m.files[i].path), &why))
				abort();
		uint8_t *enc;
		size_t len;
		if (xfer_manifest_encode(&m, &enc, &len) == 0) {
			/* modes are masked to 07777 on decode, so compare after a second trip */
			struct xfer_manifest m2;
			if (xfer_manifest_decode(enc, len, UINT32_MAX, &m2, &why))
				abort();
			uint8_t *enc2;
			size_t len2;
			if (xfer_manifest_encode(&m2, &enc2, &len2) || len2 != len ||
			    memcmp(enc, enc2, len))
				abort();
			free(enc2);
			xfer_manifest_free(&m2);
			free(enc);
		}
		fuzz_need(&m, data, size);
		xfer_manifest_free(&m);
	}
	return 0;
}
