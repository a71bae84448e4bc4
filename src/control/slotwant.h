/*
 * slotwant.h - what an instance tells Redis its queue waits for, backend by backend, when
 * the instances share a pool's capped backends (control/cluster.c, the slots script).
 *
 * A request in a pool's queue waits either for one backend (balance: llm chose to wait for
 * the busy backend holding its prompt: that backend's llm count) or for none in particular
 * (no slot this instance may fill was free at all: a "loose" waiter, which the first slot
 * freed on any backend serves). The slots script deals each backend's slots in proportion to
 * what each instance wants of it, and wakes the instances holding slots when more requests
 * wait elsewhere, so a loose waiter must be counted once in all, not once on every backend:
 * counted on each, one loose request asked each of the pool's capped backends for a slot,
 * won a larger share of every contended backend than the requests behind it, and told the
 * other instances that a request waited for each. Here the loose waiters are spread over the
 * capped backends, each getting its whole part of them and the remainder one a backend, to
 * the backends from a turn that moves each run, so that no backend is always the one asked.
 */
#ifndef ACCELNET_CONTROL_SLOTWANT_H
#define ACCELNET_CONTROL_SLOTWANT_H

#include <stddef.h>

/* The requests said to wait for the <k>th of <ncapped> capped backends (0 <= k < ncapped):
 * <own>, those waiting for it alone, plus its part of <loose>, those waiting for any, the
 * remainder of loose / ncapped going one each to the backends <turn>, <turn> + 1, ...
 * (mod ncapped). Summed over k it is the sum of every <own> plus <loose>, once. */
unsigned slotwant_waiting(unsigned own, unsigned loose, size_t k, size_t ncapped, size_t turn);

#endif
