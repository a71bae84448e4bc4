/*
 * signals.c - signalfd glue for signals.h. The watcher is a single static: one loop per
 * process handles signals (the main thread's).
 */
#include "core/signals.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

static struct {
	struct loop_io io;
	signals_fn fn;
	void *arg;
} watcher = {.io.fd = -1};

static sigset_t watched_set(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	return set;
}

void signals_block(void)
{
	sigset_t set = watched_set();
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void signals_on_io(struct loop_io *io, unsigned events)
{
	struct signalfd_siginfo si;
	(void)events;
	while (read(io->fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		watcher.fn((int)si.ssi_signo, watcher.arg);
}

int signals_watch(struct loop *loop, signals_fn fn, void *arg)
{
	sigset_t set = watched_set();
	int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	watcher.io.fd = fd;
	watcher.io.fn = signals_on_io;
	watcher.fn = fn;
	watcher.arg = arg;
	return loop_io_add(loop, &watcher.io);
}
