/*
 * transport.c - the TCP transport of a stream and the loopback stand-in (see transport.h).
 *
 * TCP writes a CHUNK frame and the bytes behind it: plain, the head leaves with the first
 * bytes (sendfile for a file, zero-copy for memory, one write for a small buffer); under TLS,
 * plain writes. The stand-in writes the bytes into the receiver's region through a shared
 * mapping and sends WRITTEN, which is what an RDMA write with immediate data amounts to. The
 * sender trusts the region it maps only after checking that it is the one advertised: a memfd
 * named after the key the receiver sent, sealed against shrinking (a peer that shrank it would
 * make our writes fault), exactly the advertised size and large enough for the window.
 */
#include "xfer/transport.h"

#include "xfer/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define REGION_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* <a> then <b>, all of both, in as few writes as the socket takes. 0 or -errno. */
static int write_two(struct net_conn *io, const void *a, size_t alen, const void *b, size_t blen)
{
	struct iovec iov[2] = {{(void *)a, alen}, {(void *)b, blen}};
	ssize_t n = net_conn_writev(io, iov, 2);
	if (n < 0)
		return n == -EAGAIN ? -ETIMEDOUT : (int)n;
	if ((size_t)n < alen) {
		int rc = net_conn_write_all(io, (const uint8_t *)a + n, alen - (size_t)n);
		return rc ? rc : net_conn_write_all(io, b, blen);
	}
	return net_conn_write_all(io, (const uint8_t *)b + (n - (ssize_t)alen),
				  blen - (size_t)(n - (ssize_t)alen));
}

static int tcp_connect(struct xfer_tp *tp, uint32_t chunk_size, unsigned window, char *err,
		       size_t errlen)
{
	(void)tp, (void)chunk_size, (void)window, (void)err, (void)errlen;
	return 0;
}

static int tcp_send_chunk(struct xfer_tp *tp, const struct xfer_chunk_meta *cm,
			  const struct xfer_open *src, uint64_t off, uint32_t len)
{
	uint8_t head[XFER_HDR_LEN + XFER_CHUNK_LEN];
	int rc;
	xfer_hdr_encode(head, XFER_CHUNK, XFER_CHUNK_LEN, len);
	xfer_chunk_encode(head + XFER_HDR_LEN, cm);
	if (tp->io->ssl) { /* TLS encrypts in user space: plain writes */
		rc = net_conn_write_all(tp->io, head, sizeof(head));
		if (!rc)
			rc = net_conn_write_all(tp->io, src->buf + off, len);
	} else if ((src->small && src->buf == src->small) || (src->fd < 0 && len < NET_ZC_MIN)) {
		/* a small file (read into a buffer the set reuses: never zero-copy) or buffer:
		 * frame and bytes in one write */
		rc = write_two(tp->io, head, sizeof(head), src->buf + off, len);
	} else {
		/* the head leaves with the first bytes; a file by sendfile, memory zero-copy */
		rc = net_zc_send_head(tp->io, head, sizeof(head));
		if (!rc && src->fd >= 0) {
			if (!(rc = net_zc_sendfile(tp->io, src->fd, (off_t)off, len)))
				atomic_fetch_add(tp->zc_bytes, len);
		} else if (!rc) {
			rc = net_zc_send(tp->zc, tp->io, src->buf + off, len);
		}
	}
	return rc;
}

static int tcp_complete(struct xfer_tp *tp, struct xfer_hdr *h, uint8_t *meta, uint32_t max)
{
	return xfer_frame_recv(tp->io, h, meta, max);
}

static void tcp_close(struct xfer_tp *tp)
{
	(void)tp;
}

const struct xfer_transport_ops xfer_tcp_ops = {
    .name = "tcp",
    .connect = tcp_connect,
    .send_chunk = tcp_send_chunk,
    .complete = tcp_complete,
    .close = tcp_close,
};

static void loop_close(struct xfer_tp *tp)
{
	if (tp->map)
		munmap(tp->map, tp->map_len);
	tp->map = NULL;
	tp->map_len = 0;
}

/* Open the region <r> advertises, checked to be it (see the essay): an fd, or -errno. */
static int region_open(const struct xfer_region *r, uint64_t need)
{
	char path[64], name[128], want[64];
	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/fd/%" PRIu32, r->pid, r->fd);
	snprintf(want, sizeof(want), "/memfd:accelnet-xfer-%016" PRIx64 " (deleted)", r->key);
	ssize_t n = readlink(path, name, sizeof(name) - 1);
	if (n < 0)
		return -errno;
	name[n] = 0;
	if (strcmp(name, want) || r->len < need || r->len > XFER_REGION_MAX)
		return -EPROTO;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & REGION_SEALS) != REGION_SEALS || fstat(fd, &st) ||
	    (uint64_t)st.st_size != r->len) {
		close(fd);
		return -EPROTO;
	}
	return fd;
}

static int loop_connect(struct xfer_tp *tp, uint32_t chunk_size, unsigned window, char *err,
			size_t errlen)
{
	uint8_t ask[XFER_REGION_ASK_LEN], meta[XFER_REGION_LEN + 300];
	struct xfer_hdr h;
	struct xfer_region r;
	uint64_t need = (uint64_t)chunk_size * window;
	loop_close(tp);
	if (tp->io->ssl) {
		snprintf(err, errlen, "%s", "not over TLS");
		return -EPROTONOSUPPORT;
	}
	wire_put64(ask, need);
	int rc = xfer_frame_send(tp->io, XFER_REGION, ask, sizeof(ask));
	if (!rc)
		rc = xfer_frame_recv(tp->io, &h, meta, sizeof(meta) - 1);
	if (rc) {
		snprintf(err, errlen, "%s", strerror(-rc));
		return rc;
	}
	if (h.type == XFER_ERR) {
		char text[300];
		xfer_err_decode(meta, h.meta_len, text, sizeof(text));
		snprintf(err, errlen, "receiver: %s", text);
		return -EPROTO;
	}
	if (h.type != XFER_REGION || xfer_region_decode(meta, h.meta_len, &r)) {
		snprintf(err, errlen, "%s", "the receiver's REGION is malformed");
		return -EPROTO;
	}
	int fd = region_open(&r, need);
	if (fd < 0) {
		snprintf(err, errlen, "cannot map the receiver's region: %s", strerror(-fd));
		return fd;
	}
	void *p = mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		rc = -errno;
		snprintf(err, errlen, "cannot map the receiver's region: %s", strerror(-rc));
		return rc;
	}
	tp->map = p;
	tp->map_len = r.len;
	tp->slot_len = chunk_size;
	tp->nslots = window;
	tp->next = tp->oldest = 0;
	return 0;
}

static int loop_send_chunk(struct xfer_tp *tp, const struct xfer_chunk_meta *cm,
			   const struct xfer_open *src, uint64_t off, uint32_t len)
{
	if (!tp->map || len > tp->slot_len || tp->next - tp->oldest >= tp->nslots)
		return -EPROTO;
	uint64_t at = (uint64_t)(tp->next % tp->nslots) * tp->slot_len;
	memcpy(tp->map + at, src->buf + off, len); /* the "RDMA write" */
	uint8_t frame[XFER_HDR_LEN + XFER_WRITTEN_LEN];
	xfer_hdr_encode(frame, XFER_WRITTEN, XFER_WRITTEN_LEN, 0);
	xfer_written_encode(frame + XFER_HDR_LEN, cm, at);
	int rc = net_conn_write_all(tp->io, frame, sizeof(frame)); /* its immediate data */
	if (!rc)
		tp->next++;
	return rc;
}

static int loop_complete(struct xfer_tp *tp, struct xfer_hdr *h, uint8_t *meta, uint32_t max)
{
	int rc = xfer_frame_recv(tp->io, h, meta, max);
	if (!rc && tp->oldest != tp->next)
		tp->oldest++; /* acknowledged in order: the oldest slot is free */
	return rc;
}

const struct xfer_transport_ops xfer_loopback_ops = {
    .name = "loopback",
    .connect = loop_connect,
    .send_chunk = loop_send_chunk,
    .complete = loop_complete,
    .close = loop_close,
};

static int loopback_asked(void)
{
	const char *t = getenv(XFER_TRANSPORT_ENV);
	return t && strcmp(t, "loopback") == 0;
}

const struct xfer_transport_ops *xfer_transport_pick(void)
{
	return loopback_asked() ? &xfer_loopback_ops : &xfer_tcp_ops;
}

int xfer_region_offered(void)
{
	return loopback_asked();
}

void xfer_region_close(struct xfer_rx_region *r)
{
	if (r->map)
		munmap(r->map, r->len);
	if (r->fd >= 0)
		close(r->fd);
	r->map = NULL;
	r->len = 0;
	r->fd = -1;
}

int xfer_region_post(struct xfer_rx_region *r, uint64_t want, struct xfer_region *adv)
{
	char name[64];
	xfer_region_close(r);
	if (want == 0 || want > XFER_REGION_MAX)
		return -EINVAL;
	if (RAND_bytes((unsigned char *)&r->key, sizeof(r->key)) != 1)
		return -EIO;
	snprintf(name, sizeof(name), "accelnet-xfer-%016" PRIx64, r->key);
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int rc = 0;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)want) || fcntl(fd, F_ADD_SEALS, REGION_SEALS))
		rc = -errno;
	else if ((p = mmap(NULL, want, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
		rc = -errno;
	if (rc) {
		close(fd);
		return rc;
	}
	r->map = p;
	r->len = want;
	r->fd = fd;
	*adv = (struct xfer_region){
	    .key = r->key, .len = want, .pid = (uint32_t)getpid(), .fd = (uint32_t)fd};
	return 0;
}

int xfer_region_bytes(const struct xfer_rx_region *r, uint64_t off, uint32_t len,
		      const uint8_t **bytes)
{
	if (!r->map || off > r->len || len > r->len - off)
		return -EPROTO;
	*bytes = r->map + off;
	return 0;
}
