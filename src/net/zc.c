/*
 * zc.c - MSG_ZEROCOPY sends and their completion reports, sendfile, a corked head (see zc.h).
 */
#include "net/zc.h"

#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>

void net_zc_init(struct net_zc *z, struct net_conn *c)
{
	memset(z, 0, sizeof(*z));
	int one = 1;
	z->enabled = setsockopt(c->fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0;
}

static void account(struct net_zc *z, uint32_t lo, uint32_t hi, int copied)
{
	for (uint32_t id = lo; id != hi + 1; id++) {
		if (copied)
			z->copied += z->size[id % NET_ZC_RING];
		z->done++;
	}
}

uint32_t net_zc_reap(struct net_zc *z, struct net_conn *c, int wait_ms)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (z->done != z->next) {
		char control[128];
		struct msghdr msg = {.msg_control = control, .msg_controllen = sizeof(control)};
		if (recvmsg(c->fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
			if (errno != EAGAIN || !wait_ms)
				break;
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			long left = wait_ms - ((now.tv_sec - t0.tv_sec) * 1000 +
					       (now.tv_nsec - t0.tv_nsec) / 1000000);
			if (left <= 0)
				break;
			struct pollfd p = {.fd = c->fd, .events = 0};
			poll(&p, 1, (int)left); /* POLLERR is always reported */
			continue;
		}
		for (struct cmsghdr *m = CMSG_FIRSTHDR(&msg); m; m = CMSG_NXTHDR(&msg, m)) {
			if (!((m->cmsg_level == SOL_IP && m->cmsg_type == IP_RECVERR) ||
			      (m->cmsg_level == SOL_IPV6 && m->cmsg_type == IPV6_RECVERR)))
				continue;
			struct sock_extended_err ee;
			memcpy(&ee, CMSG_DATA(m), sizeof(ee));
			if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			account(z, ee.ee_info, ee.ee_data, ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED);
		}
	}
	return z->next - z->done;
}

int net_zc_send(struct net_zc *z, struct net_conn *c, const void *buf, size_t len)
{
	if (!z->enabled || len < NET_ZC_MIN)
		return net_conn_write_all(c, buf, len);
	const char *p = buf;
	while (len) {
		if (z->next - z->done >= NET_ZC_RING - 1)
			net_zc_reap(z, c, 1000);
		struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
		ssize_t n = sendmsg(c->fd, &msg, MSG_ZEROCOPY | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOBUFS) { /* too many pinned: wait for reports, or copy */
				if (net_zc_reap(z, c, 100) == z->next - z->done)
					return net_conn_write_all(c, p, len);
				continue;
			}
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		z->size[z->next % NET_ZC_RING] = (uint32_t)n;
		z->next++;
		z->bytes += (uint64_t)n;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int net_zc_send_head(struct net_conn *c, const void *head, size_t len)
{
	ssize_t n = send(c->fd, head, len, MSG_MORE | MSG_NOSIGNAL);
	if (n == (ssize_t)len)
		return 0;
	if (n >= 0) /* a short head (the buffer is full): the rest without the hint */
		return net_conn_write_all(c, (const char *)head + n, len - (size_t)n);
	return errno == EAGAIN ? -ETIMEDOUT : -errno;
}

int net_zc_sendfile(struct net_conn *c, int fd, off_t off, size_t len)
{
	while (len) {
		ssize_t n = sendfile(c->fd, fd, &off, len);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return n == 0 ? -EIO : errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		len -= (size_t)n;
	}
	return 0;
}
