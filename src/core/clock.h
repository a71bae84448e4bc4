/*
 * clock.h - the monotonic clock, in milliseconds and nanoseconds.
 *
 * Every deadline in accelnet (timers, timeouts, health intervals) is measured on
 * CLOCK_MONOTONIC so that a wall-clock jump never fires or starves a timer.
 */
#ifndef ACCELNET_CORE_CLOCK_H
#define ACCELNET_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_now_ms(void)
{
	return clock_now_ns() / 1000000u;
}

#endif
