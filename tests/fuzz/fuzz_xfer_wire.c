/*
 * fuzz_xfer_wire.c - libFuzzer target: the xfer wire parsers on any bytes (a frame header,
 * then the rest as every kind of meta, a GET name list and an OK's proof included). A manifest that decodes must encode back to the same
 * bytes, and every path in it must pass the path check.
 */
#include "xfer/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct xfer_hdr h;
	if (size >= XFER_HDR_LEN)
		(void)xfer_hdr_decode(data, &h);
	struct xfer_hello hello;
	struct xfer_chunk_meta cm;
	struct xfer_ack ack;
	(void)xfer_hello_decode(data, size, &hello);
	(void)xfer_chunk_decode(data, size, &cm);
	(void)xfer_ack_decode(data, size, &ack);
	uint8_t proof[XFER_MAC_LEN];
	int has;
	if (xfer_ok_decode(data, size, proof, &has) == 0 && has != (size != 0))
		abort();
	const char *why;
	(void)xfer_path_check((const char *)data, size, &why);
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
			if (xfer_manifest_encode(&m2, &enc2, &len2) || len2 != len || memcmp(enc, enc2, len))
				abort();
			free(enc2);
			xfer_manifest_free(&m2);
			free(enc);
		}
		(void)xfer_need_len(&m);
		xfer_manifest_free(&m);
	}
	return 0;
}
