/*
 * rand.h - a small fast per-thread pseudo-random generator (xorshift64*).
 *
 * For load-balancing choices, jitter, fault injection and the ids that only need to be unique
 * (request ids, W3C trace and span ids: one output predicts the next, so they are no secret);
 * never for anything secret (keys come from OpenSSL).
 */
#ifndef ACCELNET_CORE_RAND_H
#define ACCELNET_CORE_RAND_H

#include <stdint.h>

static inline uint64_t rand_next(uint64_t *state)
{
	uint64_t x = *state ? *state : 0x9e3779b97f4a7c15u;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1du;
}

/* A double in [0, 1). */
static inline double rand_unit(uint64_t *state)
{
	return (double)(rand_next(state) >> 11) / 9007199254740992.0;
}

#endif
