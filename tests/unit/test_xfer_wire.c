/*
 * test_xfer_wire.c - the xfer wire format: headers checked, fixed metas round-trip, a
 * manifest round-trips and every truncation or lie about lengths is refused, and paths that
 * would leave the receiver's directory are refused; GET, NEED, FINISH, CHALLENGE, OK, ERR
 * and the plain preamble round-trip and refuse wrong lengths; BATCH and BATCH_ACK round-trip
 * and refuse every count and length that does not fit.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "xfer/transport.h"
#include "xfer/wire.h"

static void header_checks(void **state)
{
	(void)state;
	uint8_t b[XFER_HDR_LEN];
	struct xfer_hdr h;
	xfer_hdr_encode(b, XFER_CHUNK, XFER_CHUNK_LEN, 1 << 20);
	assert_int_equal(xfer_hdr_decode(b, &h), 0);
	assert_int_equal(h.type, XFER_CHUNK);
	assert_int_equal(h.meta_len, XFER_CHUNK_LEN);
	assert_int_equal(h.data_len, 1 << 20);
	b[0] ^= 1; /* magic */
	assert_int_equal(xfer_hdr_decode(b, &h), -EPROTO);
	xfer_hdr_encode(b, XFER_TYPE_MAX, 0, 0);
	assert_int_equal(xfer_hdr_decode(b, &h), -EPROTO);
	xfer_hdr_encode(b, XFER_MANIFEST, XFER_META_MAX + 1, 0);
	assert_int_equal(xfer_hdr_decode(b, &h), -EPROTO);
	xfer_hdr_encode(b, XFER_ACK, 9, 5); /* only chunks carry data */
	assert_int_equal(xfer_hdr_decode(b, &h), -EPROTO);
}

static void metas_round_trip(void **state)
{
	(void)state;
	uint8_t b[128];
	struct xfer_chunk_meta c = {.file = 3, .chunk = 77, .hash = 0x0123456789abcdefull}, c2;
	assert_int_equal(xfer_chunk_encode(b, &c), XFER_CHUNK_LEN);
	assert_int_equal(xfer_chunk_decode(b, XFER_CHUNK_LEN, &c2), 0);
	assert_memory_equal(&c, &c2, sizeof(c));
	assert_int_equal(xfer_chunk_decode(b, XFER_CHUNK_LEN - 1, &c2), -EPROTO);
	struct xfer_ack a = {.file = 1, .chunk = 2, .status = XFER_ACK_BAD}, a2;
	assert_int_equal(xfer_ack_encode(b, &a), XFER_ACK_LEN);
	assert_int_equal(xfer_ack_decode(b, XFER_ACK_LEN, &a2), 0);
	assert_int_equal(a2.status, XFER_ACK_BAD);
	b[8] = 9;
	assert_int_equal(xfer_ack_decode(b, XFER_ACK_LEN, &a2), -EPROTO);
	struct xfer_hello h = {.version = 1, .role = XFER_ROLE_DATA}, h2;
	memset(h.session, 7, sizeof(h.session));
	assert_int_equal(xfer_hello_encode(b, &h), XFER_HELLO_LEN);
	assert_int_equal(xfer_hello_decode(b, XFER_HELLO_LEN, &h2), 0);
	assert_memory_equal(h2.session, h.session, XFER_SESSION_LEN);
	b[4] = 9; /* role */
	assert_int_equal(xfer_hello_decode(b, XFER_HELLO_LEN, &h2), -EPROTO);
}

static void manifest_round_trip_and_truncation(void **state)
{
	(void)state;
	struct xfer_file files[2] = {
	    {.path = "model/weights.bin", .size = 5u << 20, .mode = 0640, .mtime_ns = 42},
	    {.path = "empty", .size = 0, .mode = 0600},
	};
	files[0].nchunks = xfer_chunks_of(files[0].size, 1 << 20);
	struct xfer_manifest m = {.chunk_size = 1 << 20, .nfiles = 2, .files = files, .nfwd = 1};
	m.fwd[0] = "10.0.0.2:7000,10.0.1.2:7000";
	uint8_t *enc;
	size_t len;
	assert_int_equal(xfer_manifest_encode(&m, &enc, &len), 0);
	struct xfer_manifest d;
	const char *why;
	assert_int_equal(xfer_manifest_decode(enc, len, 100, &d, &why), 0);
	assert_int_equal(d.nfiles, 2);
	assert_string_equal(d.files[0].path, "model/weights.bin");
	assert_int_equal(d.files[0].nchunks, 5);
	assert_int_equal(d.files[0].mode, 0640);
	assert_int_equal(d.files[0].mtime_ns, 42);
	assert_int_equal(d.files[1].nchunks, 0);
	assert_string_equal(d.fwd[0], m.fwd[0]);
	assert_int_equal(xfer_need_len(&d), 1);
	xfer_manifest_free(&d);
	for (size_t cut = 0; cut < len; cut++)
		assert_int_equal(xfer_manifest_decode(enc, cut, 100, &d, &why), -EPROTO);
	uint8_t *longer = malloc(len + 1);
	memcpy(longer, enc, len);
	longer[len] = 0;
	assert_int_equal(xfer_manifest_decode(longer, len + 1, 100, &d, &why), -EPROTO);
	wire_put32(longer, 100); /* chunk size below 4 KiB */
	assert_int_equal(xfer_manifest_decode(longer, len, 2000000, &d, &why), -EPROTO);
	wire_put32(longer, 1 << 20);
	wire_put32(longer + 4, 1000000); /* more files than bytes could hold */
	assert_int_equal(xfer_manifest_decode(longer, len, 2000000, &d, &why), -EPROTO);
	wire_put32(longer + 4, 3); /* over max_files: refused before the files are read */
	assert_int_equal(xfer_manifest_decode(longer, len, 2, &d, &why), -E2BIG);
	free(longer);
	free(enc);
}

static void unsafe_paths_refused(void **state)
{
	(void)state;
	const char *bad[] = {
	    "",	  "/etc/passwd", "../x", "a/../../x",	     "a//b",	       "a/./b",
	    "a/", "a\\b",	 "a\nb", ".accelnet-xfer/x", ".accelnet-xfer", ".."};
	const char *why;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(xfer_path_check(bad[i], strlen(bad[i]), &why), -EINVAL);
	const char *good[] = {"a", "a/b/c.bin", "..a", "a..", ".hidden", "x/.accelnet-xfer"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(xfer_path_check(good[i], strlen(good[i]), &why), 0);
}

/* `get`: a server may name what was asked for (its last component) and what lies beneath. */
static void names_asked_admit_only_beneath(void **state)
{
	(void)state;
	const char *asked[] = {"models/m1", "top.bin"};
	const char *ok[] = {"m1", "m1/weights.bin", "m1/a/b", "top.bin",
			    "top.bin/x" /* a tree by that name */};
	const char *no[] = {".bashrc", ".ssh/authorized_keys", "m10",
			    "m1x/y",   "models/m1/w",	       "top.bin2"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(xfer_name_asked(ok[i], asked, 2), 1);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		assert_int_equal(xfer_name_asked(no[i], asked, 2), 0);
	assert_int_equal(xfer_name_asked("m1", asked, 0), 0);
}

/* OK carries nothing or a 32-byte proof; anything else is refused. */
static void ok_proof_lengths(void **state)
{
	(void)state;
	uint8_t in[XFER_MAC_LEN + 1] = {7}, proof[XFER_MAC_LEN];
	int has = -1;
	assert_int_equal(xfer_ok_decode(in, 0, proof, &has), 0);
	assert_int_equal(has, 0);
	assert_int_equal(xfer_ok_decode(in, XFER_MAC_LEN, proof, &has), 0);
	assert_int_equal(has, 1);
	assert_int_equal(proof[0], 7);
	assert_int_equal(xfer_ok_decode(in, XFER_MAC_LEN - 1, proof, &has), -EPROTO);
	assert_int_equal(xfer_ok_decode(in, XFER_MAC_LEN + 1, proof, &has), -EPROTO);
}

static void get_round_trip(void **state)
{
	(void)state;
	const char *names[] = {"models/m1", "data"};
	uint8_t *enc;
	size_t len;
	assert_int_equal(xfer_get_encode(8, names, 2, &enc, &len), 0);
	uint32_t nconns;
	char **got;
	unsigned n;
	const char *why;
	assert_int_equal(xfer_get_decode(enc, len, &nconns, &got, &n, &why), 0);
	assert_int_equal(nconns, 8);
	assert_int_equal(n, 2);
	assert_string_equal(got[0], "models/m1");
	assert_string_equal(got[1], "data");
	free(got);
	for (size_t cut = 0; cut < len; cut++)
		assert_int_equal(xfer_get_decode(enc, cut, &nconns, &got, &n, &why), -EPROTO);
	free(enc);
	const char *bad[] = {"../etc"};
	assert_int_equal(xfer_get_encode(1, bad, 1, &enc, &len), 0);
	assert_int_equal(xfer_get_decode(enc, len, &nconns, &got, &n, &why), -EPROTO);
	free(enc);
}

static void need_round_trip(void **state)
{
	(void)state;
	struct xfer_file files[3] = {
	    {.path = "a", .nchunks = 10}, {.path = "b", .nchunks = 0}, {.path = "c", .nchunks = 3}};
	struct xfer_manifest m = {.chunk_size = 4096, .nfiles = 3, .files = files};
	uint8_t needed[13] = {1, 0, 0, 1, 0, 0, 0, 0, 1, 1, /* c: */ 0, 1, 1}, back[13];
	uint8_t *enc;
	size_t len;
	assert_int_equal(xfer_need_encode(&m, needed, &enc, &len), 0);
	assert_int_equal(len, 3); /* 2 bytes for a, none for b, 1 for c */
	assert_int_equal(enc[0], 0x09);
	assert_int_equal(enc[1], 0x03);
	assert_int_equal(enc[2], 0x06);
	assert_int_equal(xfer_need_decode(enc, len, &m, back), 0);
	assert_memory_equal(needed, back, sizeof(needed));
	assert_int_equal(xfer_need_decode(enc, len - 1, &m, back), -EPROTO);
	assert_int_equal(xfer_need_decode(enc, len + 1, &m, back), -EPROTO);
	free(enc);
}

static void small_messages(void **state)
{
	(void)state;
	uint8_t magic[4], nonce[XFER_NONCE_LEN], in[XFER_NONCE_LEN + 1] = {1, 2, 3};
	xfer_magic_encode(magic);
	assert_int_equal(xfer_magic_decode(magic), 0);
	magic[3] ^= 1;
	assert_int_equal(xfer_magic_decode(magic), -EPROTO);
	assert_int_equal(xfer_challenge_decode(in, XFER_NONCE_LEN, nonce), 0);
	assert_int_equal(nonce[2], 3);
	assert_int_equal(xfer_challenge_decode(in, XFER_NONCE_LEN - 1, nonce), -EPROTO);
	assert_int_equal(xfer_challenge_decode(in, XFER_NONCE_LEN + 1, nonce), -EPROTO);
	uint8_t ok[XFER_MAC_LEN], proof[XFER_MAC_LEN], mac[XFER_MAC_LEN] = {9};
	int has;
	assert_int_equal(xfer_ok_encode(ok, NULL), 0);
	assert_int_equal(xfer_ok_decode(ok, 0, proof, &has), 0);
	assert_int_equal(has, 0);
	assert_int_equal(xfer_ok_encode(ok, mac), XFER_MAC_LEN);
	assert_int_equal(xfer_ok_decode(ok, XFER_MAC_LEN, proof, &has), 0);
	assert_int_equal(has, 1);
	assert_memory_equal(proof, mac, XFER_MAC_LEN);
	char text[8];
	assert_int_equal(xfer_err_decode((const uint8_t *)"refused", 7, text, sizeof(text)), 7);
	assert_string_equal(text, "refused");
	assert_int_equal(
	    xfer_err_decode((const uint8_t *)"too long a reason", 17, text, sizeof(text)), 7);
	assert_string_equal(text, "too lon");
	assert_int_equal(xfer_err_decode((const uint8_t *)"", 0, text, sizeof(text)), 0);
	assert_string_equal(text, "");
	uint8_t fin[2 * XFER_WHOLE_HASH_LEN] = {5};
	const uint8_t *hashes;
	assert_int_equal(xfer_finish_decode(fin, sizeof(fin), 2, &hashes), 0);
	assert_ptr_equal(hashes, fin);
	assert_int_equal(xfer_finish_decode(fin, sizeof(fin) - 1, 2, &hashes), -EPROTO);
	assert_int_equal(xfer_finish_decode(fin, sizeof(fin), 3, &hashes), -EPROTO);
	assert_int_equal(xfer_finish_decode(fin, 0, 0, &hashes), 0);
}

static void batch_round_trip_and_limits(void **state)
{
	(void)state;
	static struct xfer_batch b, b2;
	static uint8_t buf[XFER_BATCH_META_MAX];
	const char *why;
	b.count = 3;
	b.f[0] = (struct xfer_batch_file){.file = 0, .len = 1, .hash = 11};
	b.f[1] = (struct xfer_batch_file){.file = 5, .len = XFER_BATCH_FILE_MAX, .hash = 12};
	b.f[2] = (struct xfer_batch_file){.file = 6, .len = 100, .hash = 13};
	uint32_t data = 1 + XFER_BATCH_FILE_MAX + 100;
	size_t n = xfer_batch_encode(buf, &b);
	assert_int_equal(n, 4 + 3 * XFER_BATCH_ENTRY);
	assert_int_equal(xfer_batch_decode(buf, n, data, &b2, &why), 0);
	assert_int_equal(b2.count, 3);
	assert_memory_equal(b2.f, b.f, 3 * sizeof(b.f[0]));
	/* lengths that do not add up to the data, a meta cut short or too long */
	assert_int_equal(xfer_batch_decode(buf, n, data + 1, &b2, &why), -EPROTO);
	assert_int_equal(xfer_batch_decode(buf, n, data - 1, &b2, &why), -EPROTO);
	assert_int_equal(xfer_batch_decode(buf, n - 1, data, &b2, &why), -EPROTO);
	assert_int_equal(xfer_batch_decode(buf, 3, data, &b2, &why), -EPROTO);
	/* files out of order, twice, empty, too large */
	b.f[1].file = 0;
	n = xfer_batch_encode(buf, &b);
	assert_int_equal(xfer_batch_decode(buf, n, data, &b2, &why), -EPROTO);
	b.f[1] = (struct xfer_batch_file){.file = 5, .len = 0};
	n = xfer_batch_encode(buf, &b);
	assert_int_equal(xfer_batch_decode(buf, n, 101, &b2, &why), -EPROTO);
	b.f[1].len = XFER_BATCH_FILE_MAX + 1;
	n = xfer_batch_encode(buf, &b);
	assert_int_equal(xfer_batch_decode(buf, n, data + 1, &b2, &why), -EPROTO);
	/* counts of 0 and past the limit; data past XFER_BATCH_BYTES */
	b.count = 0;
	n = xfer_batch_encode(buf, &b);
	assert_int_equal(xfer_batch_decode(buf, n, 0, &b2, &why), -EPROTO);
	wire_put32(buf, XFER_BATCH_FILES + 1);
	assert_int_equal(xfer_batch_decode(buf, XFER_BATCH_META_MAX, 0, &b2, &why), -EPROTO);
	b.count = 1;
	b.f[0].len = 1;
	n = xfer_batch_encode(buf, &b);
	assert_int_equal(xfer_batch_decode(buf, n, XFER_BATCH_BYTES + 1, &b2, &why), -EPROTO);
	/* BATCH_ACK: the files of the batch it answers, in order, with known statuses */
	b.count = 2;
	b.f[0].file = 4, b.f[1].file = 9;
	b.status[0] = XFER_ACK_OK, b.status[1] = XFER_ACK_BAD;
	n = xfer_batch_ack_encode(buf, &b);
	assert_int_equal(n, 4 + 2 * 5);
	b2 = b;
	memset(b2.status, 0xff, sizeof(b2.status));
	assert_int_equal(xfer_batch_ack_decode(buf, n, &b2), 0);
	assert_int_equal(b2.status[1], XFER_ACK_BAD);
	assert_int_equal(xfer_batch_ack_decode(buf, n - 1, &b2), -EPROTO);
	b2.f[1].file = 8;
	assert_int_equal(xfer_batch_ack_decode(buf, n, &b2), -EPROTO);
	b2.f[1].file = 9;
	buf[4 + 5 + 4] = XFER_ACK_IO + 1;
	assert_int_equal(xfer_batch_ack_decode(buf, n, &b2), -EPROTO);
	/* only CHUNK and BATCH carry data */
	uint8_t h[XFER_HDR_LEN];
	struct xfer_hdr hd;
	xfer_hdr_encode(h, XFER_BATCH, 20, 100);
	assert_int_equal(xfer_hdr_decode(h, &hd), 0);
	xfer_hdr_encode(h, XFER_BATCH_ACK, 9, 1);
	assert_int_equal(xfer_hdr_decode(h, &hd), -EPROTO);
}

/* The loopback stand-in: REGION and WRITTEN round-trip and refuse other lengths; a region's
 * bytes are handed out only inside it, whatever offset and length are asked. */
static void region_round_trip_and_bounds(void **state)
{
	(void)state;
	uint8_t buf[XFER_WRITTEN_LEN + 1];
	struct xfer_region r = {.key = 0x1122334455667788ull, .len = 12288, .pid = 7, .fd = 9}, r2;
	assert_int_equal(xfer_region_encode(buf, &r), XFER_REGION_LEN);
	assert_int_equal(xfer_region_decode(buf, XFER_REGION_LEN, &r2), 0);
	assert_memory_equal(&r, &r2, sizeof(r));
	assert_int_equal(xfer_region_decode(buf, XFER_REGION_LEN - 1, &r2), -EPROTO);
	struct xfer_chunk_meta cm = {.file = 3, .chunk = 4, .hash = 5}, cm2;
	uint64_t off;
	assert_int_equal(xfer_written_encode(buf, &cm, 8192), XFER_WRITTEN_LEN);
	assert_int_equal(xfer_written_decode(buf, XFER_WRITTEN_LEN, &cm2, &off), 0);
	assert_true(cm2.file == 3 && cm2.chunk == 4 && cm2.hash == 5 && off == 8192);
	assert_int_equal(xfer_written_decode(buf, XFER_WRITTEN_LEN + 1, &cm2, &off), -EPROTO);
	assert_int_equal(xfer_written_decode(buf, XFER_CHUNK_LEN, &cm2, &off), -EPROTO);

	struct xfer_rx_region rx = {.fd = -1};
	const uint8_t *bytes;
	assert_int_equal(xfer_region_bytes(&rx, 0, 1, &bytes), -EPROTO); /* none posted */
	assert_int_equal(xfer_region_post(&rx, 0, &r), -EINVAL);
	assert_int_equal(xfer_region_post(&rx, XFER_REGION_MAX + 1, &r), -EINVAL);
	assert_int_equal(xfer_region_post(&rx, 12288, &r), 0);
	assert_true(r.len == 12288 && r.key == rx.key && (int)r.fd == rx.fd);
	assert_int_equal(xfer_region_bytes(&rx, 0, 12288, &bytes), 0);
	assert_ptr_equal(bytes, rx.map);
	assert_int_equal(xfer_region_bytes(&rx, 8192, 4096, &bytes), 0);
	assert_int_equal(xfer_region_bytes(&rx, 8193, 4096, &bytes), -EPROTO);
	assert_int_equal(xfer_region_bytes(&rx, 12288, 1, &bytes), -EPROTO);
	assert_int_equal(xfer_region_bytes(&rx, UINT64_MAX, 4096, &bytes), -EPROTO);
	assert_int_equal(xfer_region_bytes(&rx, UINT64_MAX - 100, UINT32_MAX, &bytes), -EPROTO);
	xfer_region_close(&rx);
	assert_int_equal(rx.fd, -1);
	assert_int_equal(xfer_region_bytes(&rx, 0, 1, &bytes), -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(header_checks),
	    cmocka_unit_test(metas_round_trip),
	    cmocka_unit_test(manifest_round_trip_and_truncation),
	    cmocka_unit_test(unsafe_paths_refused),
	    cmocka_unit_test(names_asked_admit_only_beneath),
	    cmocka_unit_test(ok_proof_lengths),
	    cmocka_unit_test(get_round_trip),
	    cmocka_unit_test(need_round_trip),
	    cmocka_unit_test(small_messages),
	    cmocka_unit_test(batch_round_trip_and_limits),
	    cmocka_unit_test(region_round_trip_and_bounds),
	};
	return cmocka_run_group_tests_name("xfer wire", tests, NULL, NULL);
}
