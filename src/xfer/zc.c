/*
 * zc.c - MSG_ZEROCOPY sends and their completion reports (see zc.h).
 */
#include "xfer/zc.h"
#include "xfer/conn.h"

#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

void xfer_zc_init(struct xfer_zc *z, int fd)
{
	memset(z, 0, sizeof(*z));
	int one = 1;
	z->enabled = setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0;
}

static void account(struct xfer_zc *z, uint32_t lo, uint32_t hi, int copied)
{
	for (uint32_t id = lo; id != hi + 1; id++) {
		if (copied)
			z->copied += z->size[id % XFER_ZC_RING];
		z->done++;
	}
}

uint32_t xfer_zc_reap(struct xfer_zc *z, int fd, int wait_ms)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (z->done != z->next) {
		char control[128];
		struct msghdr msg = {.msg_control = control, .msg_controllen = sizeof(control)};
		if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
			if (errno != EAGAIN || !wait_ms)
				break;
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			long left = wait_ms - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
			if (left <= 0)
				break;
			struct pollfd p = {.fd = fd, .events = 0};
			poll(&p, 1, (int)left); /* POLLERR is always reported */
			continue;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			if (!((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
			      (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)))
				continue;
			struct sock_extended_err ee;
			memcpy(&ee, CMSG_DATA(c), sizeof(ee));
			if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			account(z, ee.ee_info, ee.ee_data, ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED);
		}
	}
	return z->next - z->done;
}

int xfer_zc_send(struct xfer_zc *z, int fd, const void *buf, size_t len)
{
	struct xfer_io io = {.fd = fd};
	if (!z->enabled || len < XFER_ZC_MIN)
		return xfer_write_all(&io, buf, len);
	const char *p = buf;
	while (len) {
		if (z->next - z->done >= XFER_ZC_RING - 1)
			xfer_zc_reap(z, fd, 1000);
		struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
		ssize_t n = sendmsg(fd, &msg, MSG_ZEROCOPY | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOBUFS) { /* too many pinned: wait for reports, or copy */
				if (xfer_zc_reap(z, fd, 100) == z->next - z->done) {
					return xfer_write_all(&io, p, len);
				}
				continue;
			}
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		z->size[z->next % XFER_ZC_RING] = (uint32_t)n;
		z->next++;
		z->bytes += (uint64_t)n;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
