/*
 * upgrade.c - starting the new executable on the running one's sockets (see upgrade.h).
 *
 * The child of fork() in a threaded process may only make async-signal-safe calls until it
 * execs, so everything is prepared before the fork: the environment (with room for
 * LISTEN_PID, which only the child knows, written in digit by digit), and copies of the
 * sockets above the numbers they must land on (3, 4, ...), so that the child's dup2() calls
 * never overwrite one another. The signals the proxy watches stay blocked across the exec:
 * the new process watches them too, and one sent before it does waits instead of killing it.
 */
#include "control/upgrade.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LISTEN_FDS_START 3
#define ENV_PID_DIGITS 20
#define UPGRADE_READY_MS 60000 /* a new process not ready by then is killed */
#define EXIT_WAIT_TRIES 200    /* times EXIT_WAIT_US: how long a failed new process may take */
#define EXIT_WAIT_US 5000      /* to be reaped once its pipe closed (the main loop waits) */

extern char **environ;

struct upgrade {
	struct loop *loop;
	struct loop_io io;	 /* the pipe's read end */
	struct loop_timer limit; /* UPGRADE_READY_MS */
	pid_t pid;
	upgrade_done_fn done;
	void *arg;
	char got[16];
	size_t ngot;
};

static char exe_path[PATH_MAX];

const char *upgrade_exe_path(void)
{
	if (!exe_path[0]) {
		ssize_t n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
		exe_path[n > 0 ? n : 0] = '\0';
	}
	return exe_path;
}

/* This process's arguments, from /proc/self/cmdline: a NULL-terminated array in one
 * allocation (free() it), or NULL. */
static char **own_argv(void)
{
	char buf[8192];
	FILE *f = fopen("/proc/self/cmdline", "re");
	if (!f)
		return NULL;
	size_t len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	if (!len || len == sizeof(buf) || buf[len - 1] != '\0')
		return NULL;
	size_t argc = 0;
	for (size_t i = 0; i < len; i++)
		argc += buf[i] == '\0';
	char **argv = malloc((argc + 1) * sizeof(char *) + len);
	if (!argv)
		return NULL;
	char *text = (char *)(argv + argc + 1);
	memcpy(text, buf, len);
	for (size_t i = 0, k = 0; k < argc; k++) {
		argv[k] = &text[i];
		i += strlen(&text[i]) + 1;
	}
	argv[argc] = NULL;
	return argv;
}

/* The environment for the new process: this one's without any LISTEN_* or
 * ACCELNET_UPGRADE_FD, plus those for its sockets; envp[*pid_at] is "LISTEN_PID=" and
 * ENV_PID_DIGITS bytes for the child to fill in. One allocation (free() it), or NULL. */
static char **upgrade_env(size_t n, const char *const *names, int pipe_fd, size_t *pid_at)
{
	size_t count = 0, bytes = 0;
	for (char **e = environ; *e; e++) {
		count++;
		bytes += strlen(*e) + 1;
	}
	size_t names_len = 0;
	for (size_t i = 0; i < n; i++)
		names_len += strlen(names[i]) + 1;
	bytes += 64 + ENV_PID_DIGITS + 64 + 64 + names_len + 32;
	char **envp = malloc((count + 5) * sizeof(char *) + bytes);
	if (!envp)
		return NULL;
	char *p = (char *)(envp + count + 5);
	size_t k = 0;
	for (char **e = environ; *e; e++) {
		if (!strncmp(*e, "LISTEN_", 7) || !strncmp(*e, "ACCELNET_UPGRADE_FD=", 20))
			continue;
		envp[k++] = *e;
	}
	*pid_at = k;
	envp[k++] = p;
	p += sprintf(p, "LISTEN_PID=%0*d", ENV_PID_DIGITS, 0) + 1;
	envp[k++] = p;
	p += sprintf(p, "LISTEN_FDS=%zu", n) + 1;
	envp[k++] = p;
	p += sprintf(p, "ACCELNET_UPGRADE_FD=%d", pipe_fd) + 1;
	envp[k++] = p;
	p += sprintf(p, "LISTEN_FDNAMES=");
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s%s", i ? ":" : "", names[i]);
	p++;
	envp[k] = NULL;
	return envp;
}

/* In the child: "LISTEN_PID=" and its pid, right-aligned in the room left for it, padded
 * with leading zeros (which a decimal parse reads past). */
static void child_write_pid(char *entry)
{
	char *digits = entry + strlen("LISTEN_PID=");
	long pid = (long)getpid();
	for (int i = ENV_PID_DIGITS - 1; i >= 0; i--) {
		digits[i] = (char)('0' + pid % 10);
		pid /= 10;
	}
}

static void upgrade_finish(struct upgrade *u, int ready, const char *why)
{
	loop_timer_stop(u->loop, &u->limit);
	loop_io_del(u->loop, &u->io);
	close(u->io.fd);
	u->io.fd = -1;
	u->done(u->arg, ready, u->pid, why);
}

static void upgrade_on_limit(struct loop_timer *t)
{
	struct upgrade *u = container_of(t, struct upgrade, limit);
	kill(u->pid, SIGKILL);
	waitpid(u->pid, NULL, 0);
	upgrade_finish(u, 0, "it was not ready within 60 s: killed");
}

static void upgrade_on_pipe(struct loop_io *io, unsigned events)
{
	struct upgrade *u = container_of(io, struct upgrade, io);
	(void)events;
	for (;;) {
		ssize_t n = read(io->fd, u->got + u->ngot, sizeof(u->got) - 1 - u->ngot);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n > 0) {
			u->ngot += (size_t)n;
			u->got[u->ngot] = '\0';
			if (strstr(u->got, "READY\n")) {
				upgrade_finish(u, 1, NULL);
				return;
			}
			if (u->ngot < sizeof(u->got) - 1)
				continue;
		}
		break; /* closed (or said something else) before it was ready */
	}
	char why[96];
	int st = 0;
	pid_t r = 0;
	/* the pipe closes as the process exits, a moment before it can be reaped */
	for (int tries = 0; tries < EXIT_WAIT_TRIES && r == 0; tries++) {
		r = waitpid(u->pid, &st, WNOHANG);
		if (r == 0)
			usleep(EXIT_WAIT_US);
	}
	if (r == 0) { /* it closed the pipe yet runs on: not one we can hand over to */
		kill(u->pid, SIGKILL);
		waitpid(u->pid, &st, 0);
		snprintf(why, sizeof(why), "it closed its pipe without saying it was ready");
	} else if (r > 0 && WIFEXITED(st)) {
		snprintf(why, sizeof(why), "it exited with status %d before it was ready",
			 WEXITSTATUS(st));
	} else if (r > 0 && WIFSIGNALED(st)) {
		snprintf(why, sizeof(why), "it died of signal %d before it was ready",
			 WTERMSIG(st));
	} else {
		snprintf(why, sizeof(why), "it ended before it was ready");
	}
	upgrade_finish(u, 0, why);
}

int upgrade_start(struct loop *loop, const char *exe, const int *fds, const char *const *names,
		  size_t n, upgrade_done_fn done, void *arg, struct upgrade **out, char *err,
		  size_t errlen)
{
	int pfd[2] = {-1, -1}, *tmp = calloc(n + 1, sizeof(int)), rc = -ENOMEM;
	struct upgrade *u = calloc(1, sizeof(*u));
	char **argv = own_argv(), **envp = NULL;
	size_t pid_at = 0, made = 0;
	if (!tmp || !u || !argv) {
		snprintf(err, errlen, "out of memory (or /proc/self/cmdline unreadable)");
		goto fail;
	}
	if (!exe || !exe[0] || access(exe, X_OK) < 0) {
		rc = errno ? -errno : -ENOENT;
		snprintf(err, errlen, "cannot run %s: %s", exe && exe[0] ? exe : "(unknown)",
			 strerror(-rc));
		goto fail;
	}
	if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = -errno;
		snprintf(err, errlen, "pipe: %s", strerror(-rc));
		goto fail;
	}
	/* copies above every number the child will dup2() onto, close-on-exec */
	for (; made <= n; made++) {
		int fd = made < n ? fds[made] : pfd[1];
		if ((tmp[made] = fcntl(fd, F_DUPFD_CLOEXEC, LISTEN_FDS_START + (int)n + 1)) < 0) {
			rc = -errno;
			snprintf(err, errlen, "dup: %s", strerror(-rc));
			goto fail;
		}
	}
	if (!(envp = upgrade_env(n, names, LISTEN_FDS_START + (int)n, &pid_at))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	pid_t pid = fork();
	if (pid < 0) {
		rc = -errno;
		snprintf(err, errlen, "fork: %s", strerror(-rc));
		goto fail;
	}
	if (pid == 0) { /* the child: async-signal-safe calls only */
		for (size_t i = 0; i <= n; i++)
			if (dup2(tmp[i], LISTEN_FDS_START + (int)i) < 0)
				_exit(127);
		/* nothing else goes through: a library's descriptor without close-on-exec (a
		 * Redis connection) would live on in the new process */
		close_range(LISTEN_FDS_START + (unsigned)n + 1, ~0U, 0);
		child_write_pid(envp[pid_at]);
		execve(exe, argv, envp);
		_exit(127);
	}
	for (size_t i = 0; i < made; i++)
		close(tmp[i]);
	close(pfd[1]);
	free(tmp);
	free(argv);
	free(envp);
	u->loop = loop;
	u->pid = pid;
	u->done = done;
	u->arg = arg;
	u->io.fd = pfd[0];
	u->io.fn = upgrade_on_pipe;
	u->limit.fn = upgrade_on_limit;
	if ((rc = loop_io_add(loop, &u->io)) < 0) { /* it cannot tell us: it must not serve */
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(pfd[0]);
		free(u);
		snprintf(err, errlen, "cannot watch the new process: %s", strerror(-rc));
		return rc;
	}
	loop_timer_set(loop, &u->limit, loop_now(loop) + UPGRADE_READY_MS);
	*out = u;
	return 0;
fail:
	for (size_t i = 0; tmp && i < made; i++)
		close(tmp[i]);
	if (pfd[0] >= 0) {
		close(pfd[0]);
		close(pfd[1]);
	}
	free(tmp);
	free(argv);
	free(envp);
	free(u);
	return rc;
}

void upgrade_free(struct upgrade *u)
{
	if (!u)
		return;
	if (u->io.fd >= 0) { /* still starting: it must not serve on without us */
		char got[8];
		ssize_t n = read(u->io.fd, got, sizeof(got));
		int ready = n >= 6 && !memcmp(got, "READY\n", 6);
		loop_timer_stop(u->loop, &u->limit);
		loop_io_del(u->loop, &u->io);
		close(u->io.fd);
		/* one that said it serves drains on SIGTERM (it watches signals by then); one that
		 * did not may not watch them yet: SIGTERM would wait, blocked, as long as it does
		 */
		kill(u->pid, ready ? SIGTERM : SIGKILL);
		log_info("upgrade: the new process (pid %d) was told to stop (%s)", (int)u->pid,
			 ready ? "SIGTERM: it had said it was ready" : "SIGKILL: it was not ready");
	}
	free(u);
}

/* The descriptor the old process waits on, or -1. */
static int upgrade_ready_fd(void)
{
	const char *v = getenv("ACCELNET_UPGRADE_FD");
	int fd = v ? atoi(v) : -1;
	return fd >= LISTEN_FDS_START ? fd : -1;
}

int upgrade_is_new(void)
{
	return upgrade_ready_fd() >= 0;
}

void upgrade_say_ready(void)
{
	int fd = upgrade_ready_fd();
	unsetenv("ACCELNET_UPGRADE_FD");
	if (fd < 0)
		return;
	ssize_t n;
	do
		n = write(fd, "READY\n", 6);
	while (n < 0 && errno == EINTR);
	close(fd);
}
