/*
 * outlier.h - when an answer from a backend may eject it: once per episode.
 *
 * Ejection is judged on answers, and answers lag: when the first slow (or failed) answer
 * ejects a backend, others sent to it before that moment are still in flight, and each
 * arrives just as slow. Were each to eject it again, one episode would count as many and
 * double its ejection time once per answer (a 3 s ejection became 24 s within 250 ms). So
 * an answer ejects only a backend that is in rotation, and only if its request went out
 * after the backend was last ejected: what it says about the backend is news. A later
 * episode (an ejection after it came back, on an answer to a request sent since) doubles
 * the time as before.
 */
#ifndef ACCELNET_POLICY_OUTLIER_H
#define ACCELNET_POLICY_OUTLIER_H

#include <stdint.h>

/*
 * Does an answer to a request sent at <sent_ms> say something new about its backend, last
 * ejected at <ejected_ms> (0: never)? An answer to a request already in flight when the
 * backend was ejected does not: it neither ejects it again nor counts toward a run of 5xx.
 */
static inline int outlier_answer_is_news(uint64_t sent_ms, uint64_t ejected_ms)
{
	return !ejected_ms || sent_ms > ejected_ms;
}

/*
 * May that answer, arriving at <now_ms>, eject a backend out of rotation until
 * <out_until_ms> (ejected or passively marked; 0: never)? Not while it is out already.
 */
static inline int outlier_may_eject(uint64_t now_ms, uint64_t sent_ms, uint64_t ejected_ms,
				    uint64_t out_until_ms)
{
	return now_ms >= out_until_ms && outlier_answer_is_news(sent_ms, ejected_ms);
}

#endif
