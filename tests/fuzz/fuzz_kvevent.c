/*
 * fuzz_kvevent.c - libFuzzer target: the KV-cache event decoder on any bytes, with room for
 * a few events and hashes. A batch it accepts must hold only what fits and events whose
 * hashes lie inside the hashes decoded; one it refuses must hold nothing.
 */
#include "obs/kvevent.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvevent ev[16];
	uint64_t hash[64];
	uint8_t *p = malloc(size ? size : 1); /* exactly <size> bytes */
	if (!p)
		return 0;
	memcpy(p, data, size);
	struct kvevent_batch b = {.ev = ev, .ev_cap = 16, .hash = hash, .hash_cap = 64};
	int rc = kvevent_decode(p, size, &b);
	if (rc < 0 && (b.nev || b.nhash || (rc != -EBADMSG && rc != -E2BIG)))
		abort();
	if (rc == 0) {
		if (b.nev > 16 || b.nhash > 64)
			abort();
		for (size_t i = 0; i < b.nev; i++)
			if (b.ev[i].kind >= KVEVENT_KINDS ||
			    (size_t)b.ev[i].first + b.ev[i].n > b.nhash)
				abort();
	}
	uint64_t seq;
	if (kvevent_seq(p, size, &seq) != (size == 8 ? 0 : -EBADMSG))
		abort();
	free(p);
	return 0;
}
