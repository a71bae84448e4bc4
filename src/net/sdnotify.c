/*
 * sdnotify.c - the sd_notify protocol (see sdnotify.h): one datagram on a unix socket.
 *
 * A socket is made per message: the states are sent a handful of times in a process's life
 * (ready, stopping), so keeping one open would only hold a descriptor. The manager learns
 * who sent it from the socket's credentials, which the kernel attaches; nothing is sent
 * with it.
 */
#include "net/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int sdnotify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	size_t plen;
	int fd, err = 0;
	if (!path || !*path)
		return 0;
	plen = strlen(path);
	/* a path ("/run/...") or an abstract name ("@..."), nothing else (as systemd) */
	if ((path[0] != '/' && path[0] != '@') || plen < 2 || plen > sizeof(sun.sun_path))
		return -EINVAL;
	if (path[0] == '/' && plen == sizeof(sun.sun_path))
		return -EINVAL; /* no room for the terminating NUL */
	memcpy(sun.sun_path, path, plen);
	if (path[0] == '@')
		sun.sun_path[0] = '\0';
	socklen_t alen =
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + (path[0] == '/' ? 1 : 0));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	size_t len = strlen(state);
	ssize_t n = sendto(fd, state, len, MSG_NOSIGNAL, (const struct sockaddr *)&sun, alen);
	if (n < 0)
		err = -errno;
	else if ((size_t)n != len)
		err = -EMSGSIZE;
	close(fd);
	return err;
}
