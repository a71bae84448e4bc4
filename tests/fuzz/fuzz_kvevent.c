/*
 * fuzz_kvevent.c - libFuzzer target: the KV-cache event decoder on any bytes, with room for
 * a few events and hashes. A batch it accepts must hold only what fits and events whose
 * hashes lie inside the hashes decoded; one it refuses must hold nothing. Decoded in parts
 * of a few bytes each (kvevent_decode_part), the same bytes give the same events in order,
 * every part within its room (token ids too), and the parts end as the whole decode does.
 * The same bytes read as a replay answer's frames (kvevent_replay_frame): only [empty,
 * 8-byte number, payload] taken, the end only with an empty payload.
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
	uint32_t tok[128];
	uint8_t *p = malloc(size ? size : 1); /* exactly <size> bytes */
	if (!p)
		return 0;
	memcpy(p, data, size);
	struct kvevent_batch b = {
	    .ev = ev, .ev_cap = 16, .hash = hash, .hash_cap = 64, .tok = tok, .tok_cap = 128};
	int rc = kvevent_decode(p, size, &b);
	if (rc < 0 && (b.nev || b.nhash || b.ntok || (rc != -EBADMSG && rc != -E2BIG)))
		abort();
	if (rc == 0) {
		if (b.nev > 16 || b.nhash > 64)
			abort();
		for (size_t i = 0; i < b.nev; i++)
			if (b.ev[i].kind >= KVEVENT_KINDS ||
			    (size_t)b.ev[i].first + b.ev[i].n > b.nhash ||
			    (size_t)b.ev[i].tok_first + b.ev[i].ntok > b.ntok)
				abort();
	}
	/* in parts: the same events, in order, and the same end */
	struct kvevent pev[16];
	uint64_t phash[64];
	uint32_t ptok[128];
	struct kvevent_batch pb = {
	    .ev = pev, .ev_cap = 16, .hash = phash, .hash_cap = 64, .tok = ptok, .tok_cap = 128};
	struct kvevent_cursor k = {0};
	size_t seen = 0;
	int prc;
	do {
		size_t at = k.at;
		prc = kvevent_decode_part(p, size, &k, &pb, 1 + size % 7);
		if (prc < 0 && (pb.nev || pb.nhash || pb.ntok))
			abort();
		if (prc >= 0 && (pb.nev > 16 || pb.nhash > 64 || k.at < at || k.at > size))
			abort();
		if (prc == 1 && k.at == at)
			abort(); /* no progress */
		for (size_t i = 0; prc >= 0 && i < pb.nev; i++, seen++) {
			if ((size_t)pev[i].first + pev[i].n > pb.nhash ||
			    (size_t)pev[i].tok_first + pev[i].ntok > pb.ntok)
				abort();
			if (rc == 0 && (seen >= b.nev || pev[i].kind != b.ev[seen].kind ||
					pev[i].n != b.ev[seen].n ||
					memcmp(phash + pev[i].first, hash + b.ev[seen].first,
					       pev[i].n * sizeof(*phash)) ||
					pev[i].ntok != b.ev[seen].ntok ||
					memcmp(ptok + pev[i].tok_first, tok + b.ev[seen].tok_first,
					       pev[i].ntok * sizeof(*ptok))))
				abort();
		}
	} while (prc == 1);
	if (rc == 0 && (prc != 0 || seen != b.nev))
		abort();
	if (rc == -EBADMSG && prc != -EBADMSG)
		abort();
	uint64_t seq;
	if (kvevent_seq(p, size, &seq) != (size == 8 ? 0 : -EBADMSG))
		abort();
	/* the same bytes as a replay answer's frames: the first 4 bytes their count and sizes */
	if (size >= 4) {
		size_t fs[3] = {p[1] % 3, p[2] % 10, (size_t)p[3] * 1000};
		int nf = p[0] % 6,
		    end = size >= 12 && !memcmp(p + 4, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
		const void *sb = fs[1] <= size - 4 ? p + 4 : p;
		if (fs[1] > size - 4)
			fs[1] = 0;
		int r = kvevent_replay_frame(nf, fs, sb, &seq);
		int ok = nf == 3 && !fs[0] && fs[1] == 8;
		if (r != (!ok ? -EBADMSG : !end ? 1 : fs[2] ? -EBADMSG : 0))
			abort();
	}
	free(p);
	return 0;
}
