/*
 * loop_uring.c - the io_uring back end of core/loop.c.
 *
 * Readiness comes as multishot polls (IORING_OP_POLL_ADD with IORING_POLL_ADD_MULTI): one
 * poll per descriptor for its whole life, for read, write and hang-up together, edge-
 * triggered as epoll's EPOLLET is (a completion per wake-up of the socket, carrying the mask
 * then), so the owners see what they saw with epoll. Adding and removing only queue
 * submission entries; the turn's wait submits them all and waits in one io_uring_enter
 * (io_uring_submit_and_wait_timeout with the timeout as an argument, no timeout entry): a
 * turn costs one system call however many descriptors came and went. A full submission queue
 * is submitted on the spot; where the kernel refuses that (completions it could not post yet),
 * the ring's completions are set aside, in order, for the next waits to deliver first.
 *
 * A completion names its descriptor by user_data = generation << 32 | fd, never by a
 * pointer: the table of slots by fd holds the io and the generation of its registration, and
 * loop_io_del bumps the generation, so completions already in the ring for a deleted io
 * (the rest of this batch, the poll's final -ECANCELED) are recognised and dropped, even if
 * its owner freed it or the descriptor number was reused. A poll the kernel ended (no
 * IORING_CQE_F_MORE: the completion queue overflowed) is armed again, and a fresh poll
 * reports the state it finds, so no edge is lost.
 *
 * The poll holds a reference to the file: a descriptor closed before loop_io_del stays open
 * in the kernel until the removal is submitted (the end of the turn), which is why loop.h
 * asks owners to delete before they close. The removal is a cancellation of the poll
 * (IORING_OP_ASYNC_CANCEL), not IORING_OP_POLL_REMOVE, which the kernel refuses (-EALREADY)
 * while a wake-up of the poll is being handled: a socket receiving as it was closed kept its
 * poll, and so its file, open for good (no FIN, no reset; a flooding client wrote on). Destroying
 * the loop submits the last removals and runs their completions, so a listener closed on the way
 * out is closed when the process exits; a killed process's ring (and the files its polls hold) is
 * torn down by the kernel a little after the process is gone.
 *
 * The data path (loop.h: loop_ring_*, for net/conn.c): a connection read for an owner is
 * attached to its descriptor's slot, and its bytes come as IORING_OP_RECV entries that pick a
 * buffer from a provided buffer ring of the loop's (RX_BUFS of RX_BUF bytes, registered at the
 * first attach): one receive in the ring at a time, queued again at its completion, with
 * POLL_FIRST (the peer answers what was just read, so nothing waits yet), while the
 * connection holds at most RX_HOLD_MAX bytes in fewer than RX_HOLD_BUFS buffers (a buffer
 * is taken whole however few bytes came: a peer sending a byte at a time while its owner
 * reads nothing would otherwise take them all); the buffers are held by the connection as a list,
 * in order, until the owner takes their bytes, and go back to the ring as they empty. (One
 * multishot receive was tried first: it cannot be held back, a cancellation does not find it
 * while data keeps coming, and one connection whose owner had no room took all the buffers.)
 * A receive that found the buffers all held (-ENOBUFS), or a connection holding too much,
 * stops; the connection reads the socket itself until it is drained, then receives through
 * the ring again. A send is a copy into a buffer of the loop's, of the smallest size class it
 * fits (512 B, 2 KiB, TX_BUF: most sends are a request head or a small answer), queued as
 * IORING_OP_SEND with MSG_WAITALL, one in flight a connection; its completion gives the buffer
 * back to its class and gives the io a write event. A class's buffers are mapped TX_SLAB bytes
 * at a time and kept while free up to a bound (512 KiB of small ones, 2 MiB of 16 KiB ones) or
 * as many as the class has in flight, whichever is more, so a steady load maps nothing at any
 * size, and a mapping whose buffers are all free goes back to the kernel past that; a class's
 * last send coming back trims it to the bound, so a burst leaves little behind. (One 16 KiB mapping
 * a send, 64 kept, the rest unmapped as they ended, cost h2c's 400 backend connections a mapping, a
 * fault and a TLB shootdown a send.) A write larger than TX_BUF is refused (-EMSGSIZE) for the
 * connection to make itself, nothing being in flight (a bulk body sent 16 KiB a turn cost five
 * times epoll's CPU). All of it is submitted with the turn's wait: a turn's receives and sends for
 * all its connections cost one io_uring_enter. A connection detached (closed) with entries in
 * flight: its receive is cancelled and its reading side shut (a receive running at that moment
 * escapes the cancellation), the completions then find no connection and give their buffers back;
 * its send goes on (the ring holds the file) for a grace of TX_GRACE_MS, a last answer's chance,
 * and is cancelled then (at once past TX_DETACHED_MAX such sends): a peer that reads nothing
 * cannot keep the socket open, with its buffers, after its connection was closed; the file
 * closes with the send's completion, which frees its buffer. Destroying the
 * loop cancels what is still in flight and waits for the completions before freeing the
 * buffers; any still in flight after a second leave the buffers allocated (logged), since the
 * kernel may yet use them.
 *
 * A connection whose owner splices (loop_ring_pause) stops receiving as one holding too much
 * does: its receive cancelled, its poll told to wake for bytes again (POLL_ALL), until a read
 * that drains the socket re-arms it; a receive that completes meanwhile, with bytes or
 * cancelled, tells the io (LOOP_READ) and is not queued again.
 */
#include "core/loop_backend.h"
#include "core/check.h"
#include "core/list.h"
#include "core/log.h"
#include "core/loop.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define URING_SQ 512
#define URING_CQ 4096
#define URING_BATCH 256

/* user_data: the kind in the top two bits; a poll's or a receive's generation and fd below */
#define UD_POLL 0ull
#define UD_RECV 1ull
#define UD_SEND 2ull
#define UD_GRACE 3ull /* a detached send's grace timer, or its cancellation: seq << 32 | id */
#define UD_KIND(ud) ((ud) >> 62)
#define GEN_MAX 0x3fffffffu
#define UD_UPDATE (1ull << 31) /* in a poll's tag: its update (poll_update), if it failed */

#define RX_BUFS 64   /* the loop's receive buffers (a power of two): 1 MiB, each touched in turn */
#define RX_BUF 16384 /* bytes each */
#define RX_HOLD_MAX 65536	   /* a connection holding more stops receiving until it is read */
#define RX_HOLD_BUFS (RX_BUFS / 8) /* ... or holding this many buffers (a byte each, maybe) */
#define RX_GROUP 0
#define TX_BUF 16384  /* what one queued send copies at most */
#define TX_SLAB 65536 /* a size class's send buffers are mapped this many bytes at a time */
#define TX_CLASSES 3
#define TX_GRACE_MS 1000   /* a send left by its closed connection may go on this long */
#define TX_RETRY_MS 100	   /* ... and is cancelled again this soon if it was running then */
#define TX_DETACHED_MAX 64 /* sends left by closed connections: past it, cancelled at once */
#define SLOTS_STEP 4096	   /* the table of descriptors grows by this many once this large */
#define TX_IDS_KEEP 1024   /* send records kept once none is in flight (more: freed then) */

struct uring_slot {
	struct loop_io *io; /* NULL: no registration */
	uint32_t gen;	    /* of the registration now, or of the next one */
	int32_t r_off;	    /* receiving through the ring: where its loop_ring_io lies from io */
};			    /* (16 bytes, not 24: a descriptor's, kept for good) */

/* The slot's connection receiving through the ring, or NULL. */
static struct loop_ring_io *slot_r(const struct uring_slot *s)
{
	return s->r_off ? (struct loop_ring_io *)((uintptr_t)s->io + (intptr_t)s->r_off) : NULL;
}

/* The send copies' size classes: most sends are a few hundred bytes (a request head, a small
 * answer, a batch of HTTP/2 frames), so a copy takes the smallest class it fits; each class
 * keeps at least <keep> free buffers (tx_buf_give says when it gives a mapping back). */
static const struct {
	uint32_t size, keep;
} tx_classes[TX_CLASSES] = {{512, 1024}, {2048, 256}, {TX_BUF, 128}};

/* TX_SLAB bytes of one class's buffers: those never handed out are carved from the end of
 * what was (so that the pages are touched only as they are needed), those given back are
 * linked through their first bytes. */
struct tx_slab {
	struct list_node avail; /* on its class's list while it has a free buffer */
	struct list_node all;	/* on the loop's list of them all */
	char *mem;
	void *free;
	uint32_t nfree, carved;
	uint32_t cls;
};

struct tx_class {
	struct list_head avail; /* slabs with a free buffer, the last given one back first */
	uint32_t nfree;		/* free buffers in all its slabs */
	uint32_t out;		/* its buffers holding a send in flight */
};

struct uring_tx {
	struct loop_ring_io *r; /* NULL: its connection is gone; freed at its completion */
	char *data;		/* NULL: the id is free */
	struct tx_slab *slab;	/* where data lies */
	int fd;
	uint32_t gen, len, off;
	uint32_t seq;	  /* the loop's count of sends at its take: tells it from a later one */
	uint8_t detached; /* its connection closed; counted in ndetached until it ends */
};

struct uring_done {
	uint64_t ud;
	int32_t res;
	uint32_t flags;
};

struct uring_be {
	struct io_uring ring;
	int ring_ok;
	struct uring_slot *slots; /* by fd */
	uint32_t nslots;
	struct uring_done done[URING_BATCH];
	unsigned ndone;
	struct uring_done *over; /* completions set aside to let a submission through, in order */
	uint32_t nover, capover;
	/* receiving and sending through the ring (set up at the first attach) */
	struct io_uring_buf_ring *br; /* NULL: not set up */
	char *rx_mem;
	uint32_t rx_next[RX_BUFS]; /* the next buffer held by the same connection, id + 1 */
	uint32_t rx_len[RX_BUFS];
	struct uring_tx *tx;   /* by id, as many as were in flight at once (since all were
				* last back, past TX_IDS_KEEP) */
	uint32_t *tx_link;     /* by id: the next free id + 1, while free */
	uint32_t ntx, tx_free; /* tx_free: the first free id + 1 */
	uint32_t tx_cap;       /* ids the two arrays have room for (doubled as they fill) */
	struct tx_class tx_class[TX_CLASSES];
	struct list_head tx_all; /* every send buffers' mapping */
	uint32_t inflight;	 /* receives and sends whose completion has not come */
	uint32_t ndetached;	 /* sends in flight whose connection is closed */
	uint32_t tx_seq;	 /* the next send's seq */
	int rx_refused;		 /* the buffer ring could not be set up: -errno */
};

static uint64_t slot_ud(uint32_t gen, int fd)
{
	return (uint64_t)gen << 32 | (uint32_t)fd;
}

static void rx_recycle(struct uring_be *be, uint32_t bid)
{
	io_uring_buf_ring_add(be->br, be->rx_mem + (size_t)bid * RX_BUF, RX_BUF,
			      (unsigned short)bid, io_uring_buf_ring_mask(RX_BUFS), 0);
	io_uring_buf_ring_advance(be->br, 1);
}

/* A new mapping of class <cls>'s buffers, all free, on the class's and the loop's lists: NULL
 * without memory. Whole pages from mmap, not malloc, so that those a burst took go back to the
 * kernel once it is over (malloc would keep the pages touched in its arena: 2,000 connections
 * answered at once left 2.7 MiB behind). */
static struct tx_slab *tx_slab_map(struct uring_be *be, uint32_t cls)
{
	struct tx_slab *sl = calloc(1, sizeof(*sl));
	void *p = MAP_FAILED;
	if (sl)
		p = mmap(NULL, TX_SLAB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(sl);
		return NULL;
	}
	sl->mem = p;
	sl->cls = cls;
	sl->nfree = TX_SLAB / tx_classes[cls].size;
	be->tx_class[cls].nfree += sl->nfree;
	list_push_front(&be->tx_all, &sl->all);
	list_push_front(&be->tx_class[cls].avail, &sl->avail);
	return sl;
}

/* A buffer of class <cls> (a free one, else a new mapping's): 0, or -ENOMEM. */
static int tx_buf_take(struct uring_be *be, uint32_t cls, struct uring_tx *t)
{
	struct tx_class *c = &be->tx_class[cls];
	uint32_t size = tx_classes[cls].size;
	struct list_node *n = list_first(&c->avail);
	struct tx_slab *sl = n ? container_of(n, struct tx_slab, avail) : tx_slab_map(be, cls);
	if (!sl)
		return -ENOMEM;
	if (sl->free) {
		t->data = sl->free;
		memcpy(&sl->free, t->data, sizeof(sl->free));
	} else {
		t->data = sl->mem + (size_t)sl->carved++ * size;
	}
	t->slab = sl;
	c->nfree--;
	c->out++;
	if (!--sl->nfree)
		list_del(&c->avail, &sl->avail);
	return 0;
}

/* Give mapping <sl> (all its buffers free) of class <c> back to the kernel. */
static void tx_slab_drop(struct uring_be *be, struct tx_class *c, struct tx_slab *sl)
{
	list_del(&c->avail, &sl->avail);
	list_del(&be->tx_all, &sl->all);
	c->nfree -= TX_SLAB / tx_classes[sl->cls].size;
	munmap(sl->mem, TX_SLAB);
	free(sl);
}

/* <t>'s buffer back to its class. A mapping all free goes back to the kernel once the class
 * keeps, without it, its bound and as many free buffers as it has sends in flight (a steady
 * load of any size, whose sends come back as fast as they go, maps nothing: a fixed bound
 * alone cost a mapping, a fault and a TLB shootdown a send once more sends than it were in
 * flight, 64 clients' 2 KiB answers against 32 kept). When the class's last send in flight
 * comes back, every mapping all free past the bound goes: a burst leaves little behind. */
static void tx_buf_give(struct uring_be *be, struct uring_tx *t)
{
	struct tx_slab *sl = t->slab;
	struct tx_class *c = &be->tx_class[sl->cls];
	uint32_t per = TX_SLAB / tx_classes[sl->cls].size, keep = tx_classes[sl->cls].keep;
	memcpy(t->data, &sl->free, sizeof(sl->free));
	sl->free = t->data;
	t->data = NULL;
	t->slab = NULL;
	c->nfree++;
	c->out--;
	if (!sl->nfree++)
		list_push_front(&c->avail, &sl->avail);
	if (sl->nfree == per && c->nfree - per >= (keep > c->out ? keep : c->out))
		tx_slab_drop(be, c, sl);
	if (c->out || c->nfree < keep + per)
		return;
	for (struct list_node *n = list_first(&c->avail), *next; n && c->nfree >= keep + per;
	     n = next) {
		struct tx_slab *s = container_of(n, struct tx_slab, avail);
		next = list_next(&c->avail, n);
		if (s->nfree == per)
			tx_slab_drop(be, c, s);
	}
}

/* Send <id> done: its buffer back to its class, the id on the free list. */
static void tx_free(struct uring_be *be, uint32_t id)
{
	struct uring_tx *t = &be->tx[id];
	if (t->detached) {
		t->detached = 0;
		be->ndetached--;
	}
	t->r = NULL;
	tx_buf_give(be, t);
	be->tx_link[id] = be->tx_free;
	be->tx_free = id + 1;
	if (be->tx_cap <= TX_IDS_KEEP)
		return;
	for (uint32_t i = 0; i < TX_CLASSES; i++)
		if (be->tx_class[i].out)
			return;
	/* the last send of a burst back: its records go too (a grace's completion still to come
	 * finds its id past ntx and is dropped) */
	free(be->tx);
	free(be->tx_link);
	be->tx = NULL;
	be->tx_link = NULL;
	be->ntx = be->tx_free = be->tx_cap = 0;
}

/* A send's id, with a buffer of at least <len> bytes (len <= TX_BUF): 0, or -ENOMEM. */
static int tx_take(struct uring_be *be, size_t len, uint32_t *out)
{
	uint32_t id, cls = 0;
	while (tx_classes[cls].size < len)
		cls++;
	if (be->tx_free) {
		id = be->tx_free - 1;
	} else { /* the ids grow to the sends in flight at once */
		if (be->ntx == be->tx_cap) {
			uint32_t cap = be->tx_cap ? be->tx_cap * 2 : 64;
			struct uring_tx *tx = realloc(be->tx, cap * sizeof(*tx));
			if (!tx)
				return -ENOMEM;
			be->tx = tx;
			uint32_t *link = realloc(be->tx_link, cap * sizeof(*link));
			if (!link)
				return -ENOMEM;
			be->tx_link = link;
			be->tx_cap = cap;
		}
		be->tx[be->ntx] = (struct uring_tx){0};
		id = be->ntx;
	}
	int rc = tx_buf_take(be, cls, &be->tx[id]);
	if (rc)
		return rc; /* the id stays free (or is not counted yet) */
	if (id == be->ntx)
		be->ntx++;
	else
		be->tx_free = be->tx_link[id];
	be->tx[id].seq = be->tx_seq++ & GEN_MAX;
	*out = id;
	return 0;
}

/* Cancel what is in flight and wait for the completions (a second at most), so that no
 * buffer is written or read by the kernel after it is freed; what is still in flight then
 * keeps its buffers (uring_destroy leaves them). */
static void ring_drain(struct uring_be *be)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&be->ring);
	if (sqe) {
		io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
		io_uring_sqe_set_data64(sqe, 0);
	}
	for (int tries = 0; be->inflight && tries < 100; tries++) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {.tv_nsec = 10000000};
		io_uring_submit_and_wait_timeout(&be->ring, &cqe, 1, &ts, NULL);
		unsigned head, n = 0;
		io_uring_for_each_cqe(&be->ring, head, cqe)
		{
			n++;
			uint64_t kind = UD_KIND(cqe->user_data);
			if (kind == UD_SEND || kind == UD_RECV)
				be->inflight--;
		}
		io_uring_cq_advance(&be->ring, n);
	}
}

static void uring_destroy(void *arg)
{
	struct uring_be *be = arg;
	if (!be)
		return;
	if (be->ring_ok) {
		/* the removals queued last (a listener closed on the way out), submitted and
		 * completed now, so that their files close with the process, not after it */
		io_uring_submit(&be->ring);
		io_uring_get_events(&be->ring);
		for (uint32_t i = 0; i < be->nover; i++) /* completions set aside: done */
			if (UD_KIND(be->over[i].ud) == UD_SEND ||
			    UD_KIND(be->over[i].ud) == UD_RECV)
				be->inflight--;
		if (be->inflight)
			ring_drain(be);
	}
	if (be->ring_ok)
		io_uring_queue_exit(&be->ring);
	if (be->inflight) {
		/* still in flight after the wait (its cancellation not done within a second):
		 * the kernel may yet write or read the buffers, so they are left, not freed */
		log_msg(LOG_WARN,
			"event loop: io_uring: %u receives and sends still in flight at exit, "
			"their buffers (%zu KiB) left allocated",
			be->inflight,
			((size_t)RX_BUFS * RX_BUF + be->tx_all.count * TX_SLAB) / 1024);
	} else {
		if (be->br)
			munmap(be->br, RX_BUFS * sizeof(struct io_uring_buf));
		free(be->rx_mem);
	}
	struct list_node *n;
	while ((n = list_pop_front(&be->tx_all))) { /* unmapped unless sends are in flight */
		struct tx_slab *sl = container_of(n, struct tx_slab, all);
		if (!be->inflight)
			munmap(sl->mem, TX_SLAB);
		free(sl);
	}
	free(be->tx);
	free(be->tx_link);
	free(be->slots);
	free(be->over);
	free(be);
}

/*
 * Needs what the back end uses: the wait's timeout as an argument (5.11), skipping the
 * completions of successful removals (5.17, after multishot poll in 5.13). Completions are
 * posted cooperatively where the kernel can (COOP_TASKRUN, 5.19: when the thread next enters
 * the kernel rather than by interrupting it); a blocking call a loop's thread makes may still
 * see EINTR when one is pending, as with a signal.
 */
static int uring_create(void **out)
{
	struct uring_be *be = calloc(1, sizeof(*be));
	struct io_uring_params p = {
	    .flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
	    .cq_entries = URING_CQ,
	};
	int err;
	if (!be)
		return -ENOMEM;
	list_init(&be->tx_all);
	for (int i = 0; i < TX_CLASSES; i++)
		list_init(&be->tx_class[i].avail);
	err = io_uring_queue_init_params(URING_SQ, &be->ring, &p);
	if (err == -EINVAL) { /* before 5.19 */
		p = (struct io_uring_params){.flags = IORING_SETUP_CQSIZE, .cq_entries = URING_CQ};
		err = io_uring_queue_init_params(URING_SQ, &be->ring, &p);
	}
	if (err < 0)
		goto fail;
	be->ring_ok = 1;
	if (!(p.features & IORING_FEAT_EXT_ARG) || !(p.features & IORING_FEAT_CQE_SKIP) ||
	    !(p.features & IORING_FEAT_NODROP)) {
		err = -ENOSYS;
		goto fail;
	}
	*out = be;
	return 0;
fail:
	uring_destroy(be);
	return err;
}

/* The completions in the ring moved aside (delivered by the next waits, before the ring's):
 * how many. With none there, one is waited for first (a millisecond at most). */
static unsigned cq_set_aside(struct uring_be *be)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	if (!io_uring_cq_ready(&be->ring)) {
		struct __kernel_timespec ts = {.tv_nsec = 1000000};
		io_uring_wait_cqe_timeout(&be->ring, &cqe, &ts);
	}
	io_uring_for_each_cqe(&be->ring, head, cqe)
	{
		if (be->nover == be->capover) {
			uint32_t cap = be->capover ? be->capover * 2 : URING_BATCH;
			struct uring_done *o = realloc(be->over, cap * sizeof(*o));
			if (!o)
				break;
			be->over = o;
			be->capover = cap;
		}
		be->over[be->nover++] = (struct uring_done){cqe->user_data, cqe->res, cqe->flags};
		n++;
	}
	io_uring_cq_advance(&be->ring, n);
	return n;
}

/* A submission entry; when the queue is full, what it holds is submitted first. A kernel that
 * refuses the submission (-EBUSY: completions it could not post wait for room in the ring;
 * -EAGAIN: no memory for now) gets room: the ring's completions are set aside, or waited
 * for, so the retry neither spins nor starves. */
static struct io_uring_sqe *uring_sqe(struct uring_be *be)
{
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&be->ring))) {
		int rc = io_uring_submit(&be->ring);
		if (rc < 0 && rc != -EINTR)
			cq_set_aside(be);
	}
	return sqe;
}

/* What a slot's poll watches: its receives in the ring tell it of bytes and of the end */
#define POLL_ALL (POLLIN | POLLOUT | POLLRDHUP)
#define POLL_RING (POLLOUT | POLLRDHUP)

static unsigned slot_mask(const struct uring_slot *s)
{
	const struct loop_ring_io *r = slot_r(s);
	return r && !r->paused ? POLL_RING : POLL_ALL;
}

static void uring_arm(struct uring_be *be, int fd, uint64_t ud)
{
	struct io_uring_sqe *sqe = uring_sqe(be);
	io_uring_prep_poll_multishot(sqe, fd, slot_mask(&be->slots[fd]));
	io_uring_sqe_set_data64(sqe, ud);
}

static int uring_add(void *arg, struct loop_io *io)
{
	struct uring_be *be = arg;
	int fd = io->fd;
	if (fd < 0)
		return -EBADF;
	if ((uint32_t)fd >= be->nslots) {
		uint32_t n = be->nslots ? be->nslots : 64;
		while (n <= (uint32_t)fd) /* past SLOTS_STEP in steps: slots are kept for good */
			n = n < SLOTS_STEP ? n * 2 : n + SLOTS_STEP;
		struct uring_slot *s = realloc(be->slots, n * sizeof(*s));
		if (!s)
			return -ENOMEM;
		memset(s + be->nslots, 0, (n - be->nslots) * sizeof(*s));
		be->slots = s;
		be->nslots = n;
	}
	struct uring_slot *s = &be->slots[fd];
	if (s->io)
		return -EEXIST;
	if (++s->gen > GEN_MAX)
		s->gen = 1;
	s->io = io;
	uring_arm(be, fd, slot_ud(s->gen, fd));
	return 0;
}

static void uring_del(void *arg, struct loop_io *io)
{
	struct uring_be *be = arg;
	int fd = io->fd;
	if (fd < 0 || (uint32_t)fd >= be->nslots || be->slots[fd].io != io)
		return;
	struct uring_slot *s = &be->slots[fd];
	struct io_uring_sqe *sqe = uring_sqe(be);
	/* a cancellation, not IORING_OP_POLL_REMOVE: a removal finding the poll being woken
	 * at that moment (bytes arriving, in the same submission even) is refused (-EALREADY)
	 * and the poll goes on for good, holding the file; a cancellation marks it, and the
	 * wake-up under way ends it */
	io_uring_prep_cancel64(sqe, slot_ud(s->gen, fd), 0);
	io_uring_sqe_set_data64(sqe, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	s->io = NULL;
	s->r_off = 0; /* its receive's completions, if any, are dropped from now on */
	if (++s->gen > GEN_MAX)
		s->gen = 1;
}

static void uring_wait(void *arg, int timeout_ms)
{
	struct uring_be *be = arg;
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
				       .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
	if (be->nover) { /* those set aside first, older than the ring's: no waiting */
		unsigned n = be->nover < URING_BATCH ? be->nover : URING_BATCH;
		io_uring_submit(&be->ring);
		memcpy(be->done, be->over, n * sizeof(*be->done));
		memmove(be->over, be->over + n, (be->nover - n) * sizeof(*be->over));
		be->nover -= n;
		be->ndone = n;
		return;
	}
	int rc =
	    io_uring_submit_and_wait_timeout(&be->ring, &cqe, 1, timeout_ms < 0 ? NULL : &ts, NULL);
	ASSERT(rc >= 0 || rc == -ETIME || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
	unsigned head, n = 0;
	io_uring_for_each_cqe(&be->ring, head, cqe)
	{
		if (n == URING_BATCH)
			break;
		be->done[n++] = (struct uring_done){cqe->user_data, cqe->res, cqe->flags};
	}
	io_uring_cq_advance(&be->ring, n);
	be->ndone = n;
}

/* The io registered on <fd> under generation <gen>, or NULL (deleted since). */
static struct loop_io *slot_io(struct uring_be *be, int fd, uint32_t gen)
{
	if (fd < 0 || (uint32_t)fd >= be->nslots || be->slots[fd].gen != gen)
		return NULL;
	return be->slots[fd].io;
}

/* One receive into a buffer the kernel picks from the loop's; <wait>: it waits for the socket
 * to be readable before trying (the peer answers what was just read: nothing waits yet). */
static void recv_arm(struct uring_be *be, struct loop_ring_io *r, int fd, int wait)
{
	struct io_uring_sqe *sqe = uring_sqe(be);
	io_uring_prep_recv(sqe, fd, NULL, RX_BUF, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = RX_GROUP;
	if (wait)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(sqe, r->rx_ud);
	r->armed = 1;
	r->cancelling = 0;
	be->inflight++;
}

static void recv_cancel(struct uring_be *be, struct loop_ring_io *r)
{
	struct io_uring_sqe *sqe = uring_sqe(be);
	io_uring_prep_cancel64(sqe, r->rx_ud, 0);
	io_uring_sqe_set_data64(sqe, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	r->cancelling = 1;
}

/* A receive's completion: its bytes held by its connection (or given back if it is gone), and
 * the next receive queued while the connection holds little. */
static void recv_done(struct uring_be *be, const struct uring_done *d)
{
	int fd = (int)(uint32_t)d->ud;
	uint32_t gen = (uint32_t)(d->ud >> 32) & GEN_MAX;
	struct loop_io *io = slot_io(be, fd, gen);
	struct loop_ring_io *r = io ? slot_r(&be->slots[fd]) : NULL;
	be->inflight--;
	if (r && r->rx_ud != d->ud)
		r = NULL;
	if (d->flags & IORING_CQE_F_BUFFER) {
		uint32_t bid = d->flags >> IORING_CQE_BUFFER_SHIFT;
		/* a buffer with no bytes kept goes back: a completion with the end or a failure
		 * can carry one (5.19-6.0 put the buffer picked whatever the outcome; later
		 * kernels recycle it themselves) */
		if (!r || d->res <= 0) {
			rx_recycle(be, bid);
		} else {
			be->rx_len[bid] = (uint32_t)d->res;
			be->rx_next[bid] = 0;
			if (r->tail)
				be->rx_next[r->tail - 1] = bid + 1;
			else
				r->head = bid + 1;
			r->tail = bid + 1;
			r->held += (uint32_t)d->res;
			r->bufs++;
		}
	}
	if (!r)
		return;
	r->armed = r->cancelling = 0;
	if (d->res == 0) {
		r->end = 1;
	} else if (d->res == -ECANCELED) {
		if (!r->paused)
			return;
		/* paused: the socket is the owner's to read from now on */
	} else if (d->res < 0 && d->res != -ENOBUFS && d->res != -EAGAIN && d->res != -EINTR) {
		r->end = d->res;
	} else if (d->res > 0 && !r->paused && r->held <= RX_HOLD_MAX && r->bufs < RX_HOLD_BUFS) {
		recv_arm(be, r, fd, 1); /* the next; more than that held: once it is read */
	}
	/* -ENOBUFS (the loop's buffers are all held) too: the connection reads the socket */
	io->fn(io, LOOP_READ);
}

static void send_queue(struct uring_be *be, uint32_t id)
{
	struct uring_tx *t = &be->tx[id];
	struct io_uring_sqe *sqe = uring_sqe(be);
	io_uring_prep_send(sqe, t->fd, t->data + t->off, t->len - t->off,
			   MSG_NOSIGNAL | MSG_WAITALL);
	io_uring_sqe_set_data64(sqe, UD_SEND << 62 | id);
	be->inflight++;
}

static void send_done(struct uring_be *be, const struct uring_done *d)
{
	uint32_t id = (uint32_t)d->ud;
	struct uring_tx *t = &be->tx[id];
	struct loop_ring_io *r = t->r;
	int fd = t->fd;
	uint32_t gen = t->gen;
	be->inflight--;
	if (r && d->res > 0 && t->off + (uint32_t)d->res < t->len) {
		t->off += (uint32_t)d->res; /* short (a signal): the rest */
		send_queue(be, id);
		return;
	}
	tx_free(be, id);
	if (!r)
		return; /* its connection is gone */
	r->tx = 0;
	if (d->res < 0)
		r->tx_err = d->res;
	if (r->shut) {
		r->shut = 0;
		shutdown(fd, SHUT_WR);
	}
	struct loop_io *io = slot_io(be, fd, gen);
	if (io)
		io->fn(io, LOOP_WRITE);
}

static uint64_t grace_ud(const struct uring_be *be, uint32_t id)
{
	return UD_GRACE << 62 | (uint64_t)be->tx[id].seq << 32 | id;
}

/* Detached send <id>: cancelled after <ms> (0: now). Submitted at once, with what was
 * queued before it (the timeout's time is read at submission). */
static void send_cancel_later(struct uring_be *be, uint32_t id, unsigned ms)
{
	struct io_uring_sqe *sqe = uring_sqe(be);
	struct __kernel_timespec ts = {.tv_sec = ms / 1000,
				       .tv_nsec = (long long)(ms % 1000) * 1000000};
	if (ms) {
		io_uring_prep_timeout(sqe, &ts, 0, 0);
	} else {
		io_uring_prep_cancel64(sqe, UD_SEND << 62 | id, 0);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS; /* a failure comes back: try again */
	}
	io_uring_sqe_set_data64(sqe, grace_ud(be, id));
	io_uring_submit(&be->ring);
}

/* A detached send's grace ran out (-ETIME), or its cancellation failed (it was running at
 * that moment: -EALREADY, or -ENOENT between its parts): cancel it (again, a little later).
 * A send that ended meanwhile, or whose buffer holds a later send, is left alone. */
static void grace_done(struct uring_be *be, const struct uring_done *d)
{
	uint32_t id = (uint32_t)d->ud, seq = (uint32_t)(d->ud >> 32) & GEN_MAX;
	if (d->res == -ECANCELED || id >= be->ntx || !be->tx[id].data || !be->tx[id].detached ||
	    be->tx[id].seq != seq)
		return;
	send_cancel_later(be, id, d->res == -ETIME ? 0 : TX_RETRY_MS);
}

static void poll_update(struct uring_be *be, int fd);

/* A poll's update failed: again, if the kernel was busy with the poll, and the registration
 * is still the one updated. */
static void update_failed(struct uring_be *be, const struct uring_done *d)
{
	int fd = (int)((uint32_t)d->ud & ~(uint32_t)UD_UPDATE);
	uint32_t gen = (uint32_t)(d->ud >> 32);
	if (d->res == -EALREADY && slot_io(be, fd, gen))
		poll_update(be, fd);
}

static void poll_done(struct uring_be *be, const struct uring_done *d)
{
	if (d->ud & UD_UPDATE) {
		update_failed(be, d);
		return;
	}
	int fd = (int)(uint32_t)d->ud;
	uint32_t gen = (uint32_t)(d->ud >> 32);
	struct loop_io *io = d->ud ? slot_io(be, fd, gen) : NULL;
	if (!io)
		return; /* a removal's failure, or an io deleted since */
	unsigned events = 0;
	if (d->res < 0) {
		/* the poll failed: let the owner try the socket and meet the error */
		events = LOOP_READ | LOOP_WRITE | LOOP_HUP;
	} else {
		if (!(d->flags & IORING_CQE_F_MORE))
			uring_arm(be, fd, d->ud);
		if (d->res & POLLIN)
			events |= LOOP_READ;
		if (d->res & POLLOUT)
			events |= LOOP_WRITE;
		if (d->res & (POLLRDHUP | POLLHUP | POLLERR))
			events |= LOOP_HUP;
		if (!events)
			return;
	}
	io->fn(io, events);
}

static void uring_dispatch(void *arg)
{
	struct uring_be *be = arg;
	for (unsigned i = 0; i < be->ndone; i++) {
		const struct uring_done *d = &be->done[i];
		switch (UD_KIND(d->ud)) {
		case UD_RECV:
			recv_done(be, d);
			break;
		case UD_SEND:
			send_done(be, d);
			break;
		case UD_GRACE:
			grace_done(be, d);
			break;
		default:
			poll_done(be, d);
		}
	}
	be->ndone = 0;
}

/* The receive buffers, registered with the ring at the first attach: 0 or -errno. */
static int rx_setup(struct uring_be *be)
{
	const char *off = getenv("ACCELNET_IO_RING"); /* 0: readiness only, to compare the two */
	if (off && strcmp(off, "0") == 0) {
		be->rx_refused = -ENOTSUP;
		return -ENOTSUP;
	}
	size_t size = RX_BUFS * sizeof(struct io_uring_buf);
	void *br = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (br == MAP_FAILED)
		return -ENOMEM;
	char *mem = malloc((size_t)RX_BUFS * RX_BUF);
	struct io_uring_buf_reg reg = {
	    .ring_addr = (unsigned long)br, .ring_entries = RX_BUFS, .bgid = RX_GROUP};
	int rc = mem ? io_uring_register_buf_ring(&be->ring, &reg, 0) : -ENOMEM;
	if (rc < 0) {
		free(mem);
		munmap(br, size);
		be->rx_refused = rc;
		log_msg(LOG_INFO,
			"event loop: io_uring reports readiness only (buffer ring refused: %s)",
			strerror(-rc));
		return rc;
	}
	be->br = br;
	be->rx_mem = mem;
	io_uring_buf_ring_init(be->br);
	for (uint32_t i = 0; i < RX_BUFS; i++)
		io_uring_buf_ring_add(be->br, mem + (size_t)i * RX_BUF, RX_BUF, (unsigned short)i,
				      io_uring_buf_ring_mask(RX_BUFS), (int)i);
	io_uring_buf_ring_advance(be->br, RX_BUFS);
	return 0;
}

/* The poll of <fd> watches what slot_mask() says now. The kernel refuses the update (-EALREADY)
 * while a wake-up of the poll is being handled: update_failed() asks again (a paused
 * connection whose poll kept the ring's mask would never hear of its bytes). A poll that
 * ended (-ENOENT) is armed again, with the mask of then, by its last completion. */
static void poll_update(struct uring_be *be, int fd)
{
	struct io_uring_sqe *sqe = uring_sqe(be);
	uint64_t ud = slot_ud(be->slots[fd].gen, fd);
	io_uring_prep_poll_update(sqe, ud, 0, slot_mask(&be->slots[fd]),
				  IORING_POLL_UPDATE_EVENTS | IORING_POLL_ADD_MULTI);
	io_uring_sqe_set_data64(sqe, ud | UD_UPDATE);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

static int ring_attach(void *arg, int fd, struct loop_ring_io *r)
{
	struct uring_be *be = arg;
	if (fd < 0 || (uint32_t)fd >= be->nslots || !be->slots[fd].io || be->slots[fd].r_off)
		return -EINVAL;
	intptr_t off = (intptr_t)((uintptr_t)r - (uintptr_t)be->slots[fd].io);
	if (!off || off < INT32_MIN || off > INT32_MAX)
		return -ENOTSUP; /* (the owner's two are one object's: never so far apart) */
	if (be->rx_refused)
		return be->rx_refused;
	if (!be->br) {
		int rc = rx_setup(be);
		if (rc < 0)
			return rc;
	}
	struct uring_slot *s = &be->slots[fd];
	s->r_off = (int32_t)off;
	r->rx_ud = UD_RECV << 62 | slot_ud(s->gen, fd);
	recv_arm(be, r, fd, 0);
	poll_update(be, fd); /* the poll no longer wakes for bytes (each would be told twice) */
	return 0;
}

static size_t ring_take(void *arg, struct loop_ring_io *r, void *buf, size_t len, int consume)
{
	struct uring_be *be = arg;
	uint32_t b = r->head, off = r->off;
	size_t got = 0;
	while (b && got < len) {
		uint32_t bid = b - 1, avail = be->rx_len[bid] - off;
		size_t take = len - got < avail ? len - got : avail;
		memcpy((char *)buf + got, be->rx_mem + (size_t)bid * RX_BUF + off, take);
		got += take;
		off += (uint32_t)take;
		if (off < be->rx_len[bid])
			break;
		b = be->rx_next[bid];
		off = 0;
		if (consume) {
			rx_recycle(be, bid);
			r->bufs--;
		}
	}
	if (consume) {
		r->head = b;
		if (!b)
			r->tail = 0;
		r->off = off;
		r->held -= (uint32_t)got;
	}
	return got;
}

static int ring_rearm(void *arg, struct loop_ring_io *r, int fd)
{
	struct uring_be *be = arg;
	if (r->armed || r->end)
		return 0;
	if ((uint32_t)fd >= be->nslots || slot_r(&be->slots[fd]) != r)
		return -EINVAL;
	if (r->paused) {
		r->paused = 0;
		poll_update(be, fd);
	}
	r->rx_ud = UD_RECV << 62 | slot_ud(be->slots[fd].gen, fd);
	recv_arm(be, r, fd, 1); /* the socket was just drained */
	return 0;
}

static int ring_pause(void *arg, struct loop_ring_io *r, int fd)
{
	struct uring_be *be = arg;
	if ((uint32_t)fd >= be->nslots || slot_r(&be->slots[fd]) != r)
		return -EINVAL;
	if (r->paused)
		return 0;
	r->paused = 1;
	poll_update(be, fd); /* before the cancellation: no byte comes between the two */
	if (r->armed && !r->cancelling)
		recv_cancel(be, r);
	return 0;
}

static ssize_t ring_send(void *arg, struct loop_ring_io *r, int fd, const struct iovec *iov, int n)
{
	struct uring_be *be = arg;
	if (r->tx_err)
		return r->tx_err;
	if (r->tx)
		return -EAGAIN;
	if ((uint32_t)fd >= be->nslots || slot_r(&be->slots[fd]) != r)
		return -EBADF;
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (total > TX_BUF)
		return -EMSGSIZE; /* bulk: the caller sends it itself, nothing being in flight */
	uint32_t id;
	int rc = tx_take(be, total, &id);
	if (rc)
		return rc;
	struct uring_tx *t = &be->tx[id];
	size_t len = 0;
	for (int i = 0; i < n && len < total; i++) { /* total fits the buffer tx_take gave */
		size_t take = iov[i].iov_len < total - len ? iov[i].iov_len : total - len;
		memcpy(t->data + len, iov[i].iov_base, take);
		len += take;
	}
	if (!len) {
		tx_free(be, id);
		return 0;
	}
	t->r = r; /* fields one by one: a compound literal would clear the bytes copied */
	t->fd = fd;
	t->gen = be->slots[fd].gen;
	t->len = (uint32_t)len;
	t->off = 0;
	send_queue(be, id);
	r->tx = id + 1;
	return (ssize_t)len;
}

static void ring_shutdown(void *arg, struct loop_ring_io *r, int fd)
{
	(void)arg;
	if (r->tx)
		r->shut = 1;
	else
		shutdown(fd, SHUT_WR);
}

static void ring_detach(void *arg, struct loop_ring_io *r, int fd)
{
	struct uring_be *be = arg;
	if (r->armed) {
		/* cancelled; and since a receive running at that moment is not found by the
		 * cancellation (-ENOENT) and could wait on, holding the file open, the reading side
		 * is shut too: a receive ends at the end it then meets (TCP tells the peer
		 * nothing of it) */
		if (!r->cancelling)
			recv_cancel(be, r);
		shutdown(fd, SHUT_RD);
		/* submitted now: a receive queued this turn (at attach, or re-armed) names the
		 * descriptor by number, looked up at submission; after the close that number may
		 * be a new connection's, whose first bytes it would take */
		if (!r->tx)
			io_uring_submit(&be->ring);
	}
	if (fd >= 0 && (uint32_t)fd < be->nslots && slot_r(&be->slots[fd]) == r)
		be->slots[fd].r_off = 0;
	for (uint32_t b = r->head; b;) {
		uint32_t next = be->rx_next[b - 1];
		rx_recycle(be, b - 1);
		b = next;
	}
	if (r->tx) {
		/* the send goes on for a grace (a last answer to a peer still reading), its buffer
		 * freed when it is done; submitted now if it was still queued, since the descriptor
		 * is looked up at submission and is about to close (the ring then holds the file
		 * until the send completes). A peer that reads nothing would keep it (and the
		 * socket, its buffers, no FIN) for good: past the grace, or at once when too many
		 * are left so, it is cancelled, and the file closes with its completion. */
		uint32_t id = r->tx - 1;
		be->tx[id].r = NULL;
		be->tx[id].detached = 1;
		be->ndetached++;
		send_cancel_later(be, id, be->ndetached > TX_DETACHED_MAX ? 0 : TX_GRACE_MS);
	}
}

const struct loop_backend_ops loop_uring_ops = {
    .name = "io_uring",
    .create = uring_create,
    .destroy = uring_destroy,
    .add = uring_add,
    .del = uring_del,
    .wait = uring_wait,
    .dispatch = uring_dispatch,
    .ring_attach = ring_attach,
    .ring_take = ring_take,
    .ring_rearm = ring_rearm,
    .ring_pause = ring_pause,
    .ring_send = ring_send,
    .ring_shutdown = ring_shutdown,
    .ring_detach = ring_detach,
};
