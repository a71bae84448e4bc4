/*
 * upgrade.h - replacing the running executable without closing a listening socket
 * (SIGUSR2; docs/operations.md, "Binary upgrade").
 *
 * The running process starts the executable now at the path it was started from (the new
 * one, once a package upgrade has replaced the file) with the same arguments, and hands it
 * every listening socket it accepts on, the way a service manager does (LISTEN_PID,
 * LISTEN_FDS, LISTEN_FDNAMES: net/activation.h), plus the write end of a pipe named by
 * ACCELNET_UPGRADE_FD. The new process builds everything on those sockets, starts serving,
 * and writes "READY\n" to the pipe (and tells the service manager its new MAINPID); the
 * old one then drains and exits. If the new process exits before it is ready (a bad config,
 * a binary that does not start), the pipe closes without READY and the old one carries on
 * as if nothing had happened. Both accept on the same sockets meanwhile: no connection
 * waits on a socket nobody accepts from, and none is refused.
 */
#ifndef ACCELNET_CONTROL_UPGRADE_H
#define ACCELNET_CONTROL_UPGRADE_H

#include "core/loop.h"

#include <stddef.h>
#include <sys/types.h>

struct upgrade;

/* What became of it: <ready> 1, the new process <pid> serves; 0, it failed (<why>). */
typedef void (*upgrade_done_fn)(void *arg, int ready, pid_t pid, const char *why);

/*
 * Start <exe> with this process's own arguments, handing it <fds> (n listening sockets,
 * <names> for LISTEN_FDNAMES); <done> runs on <loop> once it is ready or has failed. 0, or
 * -errno with <err> filled.
 */
int upgrade_start(struct loop *loop, const char *exe, const int *fds, const char *const *names,
		  size_t n, upgrade_done_fn done, void *arg, struct upgrade **out, char *err,
		  size_t errlen);
/* Forget it: after <done> ran; before, the new process is told to stop (SIGTERM: the
 * process that started it is stopping). UPGRADE_READY_MS (60 s) after the start, a new
 * process that has not said it is ready is killed and <done> says so. */
void upgrade_free(struct upgrade *u);

/* The new process's side: 1 when an upgrade started it (the process that did waits for
 * upgrade_say_ready()). */
int upgrade_is_new(void);
/* Tell the process that started it (if one did) that it serves: after it has said so in its
 * own log, which the old process's "serves" line must not overtake. */
void upgrade_say_ready(void);

/* The path this executable was started from, read at start (a later upgrade of the package
 * replaces the file, and /proc/self/exe then names the deleted one). */
const char *upgrade_exe_path(void);

#endif
