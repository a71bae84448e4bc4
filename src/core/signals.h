/*
 * signals.h - process signals delivered as loop events (signalfd), so that SIGTERM, SIGINT,
 * SIGHUP, SIGUSR1 and SIGUSR2 are handled in ordinary code instead of async-signal handlers.
 */
#ifndef ACCELNET_CORE_SIGNALS_H
#define ACCELNET_CORE_SIGNALS_H

#include "core/loop.h"

typedef void (*signals_fn)(int signo, void *arg);

/*
 * Block SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 in the calling thread (threads created
 * afterwards inherit the mask) and ignore SIGPIPE. Call before starting any thread.
 */
void signals_block(void);
/* Deliver the blocked signals to <fn> on <loop>. 0 or -errno. */
int signals_watch(struct loop *loop, signals_fn fn, void *arg);

#endif
