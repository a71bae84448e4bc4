/*
 * activation.c - systemd socket activation (see activation.h), without libsystemd.
 *
 * The protocol: descriptors 3 .. 3+LISTEN_FDS-1 are inherited, meant for the process whose
 * pid is LISTEN_PID (a variable inherited by a child is not for it). Each is checked here
 * rather than trusted: a datagram or a not-yet-listening socket in a .socket unit is the
 * operator's mistake, said at start with the descriptor's name, not an accept() that fails
 * forever.
 */
#include "net/activation.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LISTEN_FDS_START 3
#define LISTEN_FDS_MAX 1024

/* Parse a decimal unsigned <text> whole; -1 when it is not one. */
static long parse_count(const char *text)
{
	char *end;
	if (!text || *text < '0' || *text > '9')
		return -1;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (errno || *end || v > LONG_MAX)
		return -1;
	return (long)v;
}

/* The <i>th colon-separated name of <names> into <out>, or "fd N". */
static void socket_name(const char *names, size_t i, int fd, char *out, size_t len)
{
	for (size_t k = 0; names && k < i; k++) {
		names = strchr(names, ':');
		if (names)
			names++;
	}
	size_t n = names ? strcspn(names, ":") : 0;
	if (n)
		snprintf(out, len, "%.*s", (int)n, names);
	else
		snprintf(out, len, "fd %d", fd);
}

static int check_socket(struct activation_socket *s, char *err, size_t errlen)
{
	int type = 0, listening = 0;
	socklen_t len = sizeof(type);
	if (getsockopt(s->fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM) {
		snprintf(err, errlen,
			 "the socket passed by the service manager as %s is not a "
			 "stream socket (ListenStream= in the .socket unit)",
			 s->name);
		return -ENOTSOCK;
	}
	len = sizeof(listening);
	if (getsockopt(s->fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening) {
		snprintf(err, errlen,
			 "the socket passed by the service manager as %s is not "
			 "listening (Accept=no in the .socket unit)",
			 s->name);
		return -EINVAL;
	}
	s->addr.len = sizeof(s->addr.ss);
	if (getsockname(s->fd, (struct sockaddr *)&s->addr.ss, &s->addr.len) < 0 ||
	    (s->addr.ss.ss_family != AF_INET && s->addr.ss.ss_family != AF_INET6)) {
		snprintf(err, errlen,
			 "the socket passed by the service manager as %s is not a "
			 "TCP socket on an IPv4 or IPv6 address",
			 s->name);
		return -EAFNOSUPPORT;
	}
	int fl = fcntl(s->fd, F_GETFL);
	if (fl < 0 || fcntl(s->fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(s->fd, F_SETFD, FD_CLOEXEC) < 0) {
		int e = errno;
		snprintf(err, errlen, "socket %s: %s", s->name, strerror(e));
		return -e;
	}
	return 0;
}

int activation_take(struct activation *a, char *err, size_t errlen)
{
	const char *names = getenv("LISTEN_FDNAMES");
	long pid = parse_count(getenv("LISTEN_PID"));
	long n = parse_count(getenv("LISTEN_FDS"));
	int rc = 0;
	a->socks = NULL;
	a->n = 0;
	if (pid != (long)getpid() || n <= 0)
		goto unset; /* not for this process, or nothing passed */
	if (n > LISTEN_FDS_MAX) {
		snprintf(err, errlen, "LISTEN_FDS=%ld: more sockets than the %d accepted", n,
			 LISTEN_FDS_MAX);
		rc = -EINVAL;
		goto unset;
	}
	if (!(a->socks = calloc((size_t)n, sizeof(*a->socks)))) {
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto unset;
	}
	a->n = (size_t)n;
	for (size_t i = 0; i < a->n; i++) {
		a->socks[i].fd = LISTEN_FDS_START + (int)i;
		socket_name(names, i, a->socks[i].fd, a->socks[i].name, sizeof(a->socks[i].name));
	}
	for (size_t i = 0; i < a->n && !rc; i++)
		rc = check_socket(&a->socks[i], err, errlen);
	if (rc)
		activation_close(a);
unset:
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return rc;
}

int activation_find(struct activation *a, const struct net_addr *addr)
{
	for (size_t i = 0; i < a->n; i++) {
		if (a->socks[i].fd >= 0 && net_addr_same(&a->socks[i].addr, addr)) {
			a->socks[i].taken = 1;
			return a->socks[i].fd;
		}
	}
	return -1;
}

size_t activation_find_all(struct activation *a, const struct net_addr *addr, int *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < a->n && n < cap; i++) {
		if (a->socks[i].fd >= 0 && !a->socks[i].taken &&
		    net_addr_same(&a->socks[i].addr, addr)) {
			a->socks[i].taken = 1;
			out[n++] = a->socks[i].fd;
		}
	}
	return n;
}

const struct activation_socket *activation_untaken(const struct activation *a)
{
	for (size_t i = 0; i < a->n; i++)
		if (!a->socks[i].taken)
			return &a->socks[i];
	return NULL;
}

void activation_close(struct activation *a)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->socks[i].fd >= 0)
			close(a->socks[i].fd);
	free(a->socks);
	a->socks = NULL;
	a->n = 0;
}
