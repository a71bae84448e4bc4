/*
 * sock.c - thin wrappers over the socket calls, so that option handling lives in one place.
 */
#include "net/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

static void sock_set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int sock_listen(const struct net_addr *addr, int reuseport)
{
	int one = 1, err;
	int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		goto fail;
	if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		goto fail;
	if (addr->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0)
		goto fail;
	if (listen(fd, 4096) < 0)
		goto fail;
	return fd;
fail:
	err = -errno;
	close(fd);
	return err;
}

int sock_probe_free(const struct net_addr *addr)
{
	int one = 1, rc = 0;
	int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* SO_REUSEADDR: a port with only closing connections on it is free; a listener
	 * (with or without SO_REUSEPORT) still makes bind() fail */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		rc = -errno;
	if (!rc && addr->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (!rc && bind(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int sock_dup(int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	return d < 0 ? -errno : d;
}

int sock_accept(int lfd, struct sockaddr_storage *peer, socklen_t *peerlen)
{
	*peerlen = sizeof(*peer);
	int fd = accept4(lfd, (struct sockaddr *)peer, peerlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	sock_set_nodelay(fd);
	return fd;
}

int sock_connect(const struct net_addr *addr)
{
	int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sock_set_nodelay(fd);
	if (connect(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0 &&
	    errno != EINPROGRESS) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int sock_error(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return -err;
}

int sock_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void sock_abort(int fd)
{
	shutdown(fd, SHUT_RDWR);
}
