/*
 * check.h - invariants that stay on in every build.
 *
 * A violated invariant is a bug in accelnet, never a user error: it prints where and aborts.
 * User errors (bad config, bad requests) are returned as -errno or HTTP statuses instead.
 * Three macros only:
 *   ASSERT(cond)          the condition must hold
 *   ASSERT_NOT_REACHED()  control must never get here
 *   CHECK(call)           a system call that cannot fail in a correct program returned -1
 */
#ifndef ACCELNET_CORE_CHECK_H
#define ACCELNET_CORE_CHECK_H

#include "core/log.h" /* check_fail(): the log's, which says where, then aborts */

#define ASSERT(cond) ((cond) ? (void)0 : check_fail(__FILE__, __LINE__, #cond))
#define ASSERT_NOT_REACHED() check_fail(__FILE__, __LINE__, "not reached")
#define CHECK(call) ((call) != -1 ? (void)0 : check_fail(__FILE__, __LINE__, #call))

#endif
