/*
 * receiver.c - the receiving protocol: MANIFEST, CHUNK and FINISH on a connection whose
 * handshake is done, for the daemon (daemon.c) and for `xfer get`'s receiving half (get.c).
 *
 * MANIFEST opens or joins the transfer named by the HELLO's session id (a struct
 * rx_transfer, shared by all the connections of one transfer, across links, and alive as
 * long as one of them holds it). The manifest comes in parts, on the connection that sent
 * the first (the sender lists a tree as it sends it); each part is refused before anything is
 * created for it when the files so far would be too many, a name comes twice (in it, or in an
 * earlier part: a set of the names, bounded as the files are), a bcast hop lies outside
 * --relay-to (its names resolved once: the addresses checked are the ones dialed), its files need
 * more bytes than the free space less what live transfers reserved, or, pulling, it names what the
 * client did not ask for; a part after the last, a chunk size that differs from the first part's,
 * and a last part whose totals are not what the parts added up to are refused too. Otherwise its
 * files are looked at, space is reserved, they become visible to CHUNK and BATCH, and the part's
 * NEED is answered. The files live in a table that grows part by part without moving (table.h),
 * since other connections write chunks of the files listed before. FINISH waits for the last part.
 * CHUNK is read into its part, hashed as it arrives, written with pwrite, and acknowledged. BATCH
 * (small files whole, checked against the manifest before its data is read) puts each file in place
 * at once, without a part or state (store.h, xfer_store_put_whole), and is acknowledged once.
 * FINISH completes every file (a tree's files shared among a few threads), syncs the file system
 * once when batched files were renamed unsynced, and answers DONE. What survives a transfer is on
 * disk (see store.h).
 *
 * Deadlines: each frame must come whole within serve --frame-ms of its first byte, longer by
 * its length at --min-rate-kib (server.h: the accept loop cuts the connection past it), so a
 * peer that trickles a CHUNK or BATCH cannot hold a connection and its thread; the deadline
 * ends when the frame's bytes are in, before the disk is written or the answer sent.
 *
 * Descriptors: a file is held (its part and state open) while its chunks arrive, let go once
 * it is complete, and let go between chunks too once the transfer holds more than
 * RX_HELD_MAX files: a sender that starts many files at once costs no more descriptors.
 *
 * Chunks: a verified chunk is never written again; writers of one chunk are counted, and a
 * chunk that had two at once is re-hashed at FINISH (store.h), after connections still
 * writing into verified chunks are ended. A small file may come both ways at once: its BATCH
 * on one link and an end-game copy as a CHUNK on another (the sender sends copies as chunks).
 * The copy's writer then creates a part and state, the batch puts the file in place whole,
 * and FINISH, finding the file in place, removes that part before DONE (store.h).
 *
 * bcast: a manifest with further hops makes this receiver also a sender. Before answering a
 * part's NEED it forwards the part to the next hop (the first part starts an engine to it, with
 * the remaining hops; the later ones are listed to it as they arrive), and feeds it each chunk
 * once written, so parts and chunks flow down the chain as they arrive; DONE goes upstream only
 * when the next hop said DONE.
 */
#include "xfer/receiver.h"

#include "core/loop.h"
#include "net/sock.h"
#include "xfer/engine.h"
#include "xfer/server.h"
#include "xfer/store.h"
#include "xfer/table.h"
#include "xfer/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation per chunk */
#include <xxhash.h>

#define RX_FINISH_WAIT_S 60	   /* FINISH waits this long for a chunk's last writer to let go */
#define RX_JOIN_WAIT_S 10	   /* a link joining waits this long for the manifest's last part */
#define RX_HASH_PIECE (256 * 1024) /* a chunk is hashed as it arrives, a piece at a time */
#define RX_LOWAT_MIN (64 * 1024)   /* a smaller piece is read without the mark: 4 calls less */
#define RX_HELD_MAX 16		   /* files a transfer keeps open between their chunks */
#define RX_FINISH_THREADS 4	   /* threads completing the files of one FINISH */
#define RX_FINISH_RUN 256	   /* files a thread takes at least */

/* A connection receiving a chunk into a part (on its stack, listed under the transfer's mu). */
struct writer {
	struct list_node node;
	int fd;
	uint32_t file, chunk;
};

/* One file of a transfer: as its manifest says, and as the store keeps it. */
struct rx_file {
	struct xfer_file mf; /* its path owned here */
	struct xfer_store_file sf;
};

struct rx_transfer {
	struct list_node node;	  /* on srv->transfers */
	struct list_head writers; /* struct writer, under mu */
	uint8_t id[XFER_SESSION_LEN];
	unsigned refs;
	pthread_mutex_t mu;
	pthread_cond_t cv;	/* under mu: a chunk's writer finished */
	uint64_t reserved;	/* bytes of free space counted as this transfer's (under srv->mu) */
	struct xfer_manifest m; /* chunk size and hops; nfiles: files listed (under mu); no files */
	struct xfer_table files; /* struct rx_file: grows part by part (table.h) */
	_Atomic uint32_t listed; /* files a CHUNK or BATCH may name (released once opened) */
	uint32_t nalloc;	 /* entries whose path the table owns (freed with it) */
	uint32_t nopen;		 /* entries the store opened (closed with it) */
	uint64_t listed_bytes;	 /* the files' sizes, for the last part's totals */
	uint32_t *names;	 /* open addressing: file + 1 per slot, 0 empty: no name twice */
	uint32_t names_cap;	 /* a power of two, above twice the files listed */
	struct xfer_server_conn *lister; /* the connection the manifest's parts come on */
	int complete;			 /* the last part was taken: FINISH may come */
	unsigned no_parts;		 /* XFER_STORE_NO_PARTS when its first part came */
	char dir[XFER_PATH_MAX + 1];	 /* the last directory looked at, */
	unsigned not_there;		 /* and XFER_STORE_NOT_THERE when it was missing */
	uint32_t held; /* files acquired for their chunks (under mu): at most about RX_HELD_MAX */
	struct xfer_engine *relay;
	struct xfer_manifest relay_m;
	struct xfer_path hop[XFER_LINKS_MAX]; /* the next bcast hop, resolved and checked once */
	int nhop;
	int finished;
	_Atomic uint32_t batched; /* files put in place from batches (synced before DONE) */
};

static struct rx_file *rx_entry(const struct rx_transfer *rx, uint32_t i)
{
	return xfer_table_at(&rx->files, i);
}

static struct xfer_store_file *rx_file(const struct rx_transfer *rx, uint32_t i)
{
	return &rx_entry(rx, i)->sf;
}

/*
 * Every address of a bcast hop ("HOST:PORT[,...]") inside --relay-to: the number of addresses,
 * resolved into <paths> (the engine dials those, never resolving the names again: a second
 * answer need not be the first), or -EINVAL / -EPERM with the reason in <err>.
 */
static int relay_allowed(const struct xfer_server *s, const char *hop, struct xfer_path *paths,
			 char *err, size_t errlen)
{
	char why[200];
	int n = xfer_paths_parse(hop, NULL, paths, XFER_LINKS_MAX, why, sizeof(why));
	if (n < 0) {
		snprintf(err, errlen, "bad bcast hop '%.100s': %s", hop, why);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		if (!net_cidr_match(s->relay, s->nrelay,
				    (const struct sockaddr *)&paths[i].remote.ss)) {
			snprintf(err, errlen,
				 "this %s does not relay to %s (a server allows bcast hops with "
				 "--relay-to)",
				 s->puller ? "client" : "server", paths[i].rname);
			return -EPERM;
		}
	}
	return n;
}

/* Give back up to <bytes> of a transfer's reservation (under s->mu). */
static void unreserve_locked(struct xfer_server *s, struct rx_transfer *rx, uint64_t bytes)
{
	uint64_t d = bytes < rx->reserved ? bytes : rx->reserved;
	rx->reserved -= d;
	s->reserved -= d;
}

static void transfer_free(struct xfer_server *s, struct rx_transfer *rx, int refused)
{
	if (rx->relay) {
		if (!rx->finished)
			xfer_engine_abort(rx->relay, -ECONNRESET, "upstream went away");
		xfer_engine_free(rx->relay);
	}
	for (uint32_t i = 0; i < rx->nopen; i++) {
		if (refused)
			xfer_store_discard(s->dirfd, rx_file(rx, i));
		xfer_store_close(rx_file(rx, i));
	}
	pthread_mutex_lock(&s->mu);
	unreserve_locked(s, rx, rx->reserved);
	pthread_mutex_unlock(&s->mu);
	for (uint32_t i = 0; i < rx->nalloc; i++)
		free(rx_entry(rx, i)->mf.path);
	xfer_table_free(&rx->files);
	free(rx->names);
	free(rx->relay_m.files);
	xfer_manifest_free(&rx->m);
	pthread_cond_destroy(&rx->cv);
	pthread_mutex_destroy(&rx->mu);
	free(rx);
}

void xfer_receiver_put(struct xfer_server *s, struct rx_transfer *rx)
{
	pthread_mutex_lock(&s->mu);
	int last = --rx->refs == 0;
	if (last)
		list_del(&s->transfers, &rx->node);
	pthread_mutex_unlock(&s->mu);
	if (last)
		transfer_free(s, rx, 0);
}

/*
 * Note file <f>'s name, refusing one the transfer listed already, in this part or an earlier
 * one: an open-addressing set of file indices, grown to stay under half full (it holds at most
 * --max-files names). 0, -EEXIST, or -ENOMEM.
 */
static int name_note(struct rx_transfer *rx, uint32_t f)
{
	const char *path = rx_entry(rx, f)->mf.path;
	if ((uint64_t)(f + 1) * 2 > rx->names_cap) {
		uint32_t cap = rx->names_cap ? rx->names_cap * 2 : 1024;
		uint32_t *v = calloc(cap, sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (uint32_t i = 0; i < rx->names_cap; i++) {
			if (!rx->names[i])
				continue;
			const char *p = rx_entry(rx, rx->names[i] - 1)->mf.path;
			uint32_t h = (uint32_t)XXH3_64bits(p, strlen(p)) & (cap - 1);
			while (v[h])
				h = (h + 1) & (cap - 1);
			v[h] = rx->names[i];
		}
		free(rx->names);
		rx->names = v;
		rx->names_cap = cap;
	}
	uint32_t h = (uint32_t)XXH3_64bits(path, strlen(path)) & (rx->names_cap - 1);
	for (; rx->names[h]; h = (h + 1) & (rx->names_cap - 1))
		if (!strcmp(rx_entry(rx, rx->names[h] - 1)->mf.path, path))
			return -EEXIST;
	rx->names[h] = f + 1;
	return 0;
}

/*
 * Take the files of part <p> into the transfer's table (the paths move there; p->files is
 * freed) and check what a part may ask before anything is looked at (at most max_files files in
 * all is checked by the decoder, as soon as it reads the count): no name twice, in this part or
 * an earlier one; for `get` only names that were asked for; and in the last part, totals that
 * are what the parts added up to. The files are [rx->m.nfiles, rx->m.nfiles + p->nfiles). 0, or
 * -errno with the reason in <err>.
 */
static int part_admit(const struct xfer_server *s, struct rx_transfer *rx, struct xfer_manifest *p,
		      char *err, size_t errlen)
{
	uint32_t from = rx->m.nfiles, n = p->nfiles;
	if (xfer_table_grow(&rx->files, (uint64_t)from + n)) {
		snprintf(err, errlen, "out of memory");
		xfer_manifest_free(p);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		rx_entry(rx, from + i)->mf = p->files[i];
		p->files[i].path = NULL;
	}
	rx->nalloc = from + n;
	uint8_t last = p->last;
	uint32_t total_files = p->total_files;
	uint64_t total_bytes = p->total_bytes, bytes = rx->listed_bytes;
	xfer_manifest_free(p);
	for (uint32_t i = from; i < from + n; i++) {
		const struct xfer_file *f = &rx_entry(rx, i)->mf;
		if (s->puller && !xfer_name_asked(f->path, s->asked, s->nasked)) {
			snprintf(err, errlen,
				 "the server offered '%.200s', which was not asked for", f->path);
			return -EPERM;
		}
		int rc = name_note(rx, i);
		if (rc) {
			snprintf(err, errlen,
				 rc == -EEXIST ? "'%.200s' appears twice in the manifest"
					       : "out of memory",
				 f->path);
			return rc == -EEXIST ? -EINVAL : rc;
		}
		bytes = f->size > UINT64_MAX - bytes ? UINT64_MAX : bytes + f->size;
	}
	if (last && (total_files != from + n || total_bytes != bytes)) {
		snprintf(err, errlen,
			 "bad manifest: its last part says %u files and %llu bytes in all, its "
			 "parts listed %u files and %llu bytes",
			 total_files, (unsigned long long)total_bytes, from + n,
			 (unsigned long long)bytes);
		return -EINVAL;
	}
	rx->listed_bytes = bytes;
	return 0;
}

/* Look at files [from, to) of the transfer (creating nothing). */
static int part_open(struct xfer_server *s, struct rx_transfer *rx, uint32_t from, uint32_t to,
		     char *err, size_t errlen)
{
	const char *why = NULL;
	/* what is missing already, looked at once, not once a file: the directory of partial
	 * files (nothing to resume), and the last directory found missing (nothing in place). Both
	 * as they were when the transfer's first part (or the directory's first file) came: the
	 * transfer's own batches create them meanwhile, and a part or file another transfer puts
	 * there later is met as it would be after a whole manifest (store.h: the writer's lock) */
	struct stat st;
	if (from == 0)
		rx->no_parts = fstatat(s->dirfd, XFER_STORE_DIR, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
				       errno == ENOENT
				   ? XFER_STORE_NO_PARTS
				   : 0;
	unsigned skip = rx->no_parts;
	char *dir = rx->dir;
	for (uint32_t i = from; i < to; i++, rx->nopen++) {
		struct xfer_file *mf = &rx_entry(rx, i)->mf;
		const char *path = mf->path, *slash = strrchr(path, '/');
		size_t len = slash ? (size_t)(slash - path) : 0;
		if (!len || len >= sizeof(rx->dir)) {
			dir[0] = 0;
			rx->not_there = 0;
		} else if (strlen(dir) != len || memcmp(dir, path, len)) {
			memcpy(dir, path, len);
			dir[len] = 0;
			rx->not_there =
			    fstatat(s->dirfd, dir, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT
				? XFER_STORE_NOT_THERE
				: 0;
		}
		struct xfer_manifest one = {
		    .chunk_size = rx->m.chunk_size, .nfiles = 1, .files = mf};
		int rc =
		    xfer_store_open(s->dirfd, &one, 0, skip | rx->not_there, rx_file(rx, i), &why);
		if (rc) {
			snprintf(err, errlen, "'%s': %s: %s", path, why, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/*
 * Count the space files [from, to) still need as reserved, if it fits in the free space less
 * what live transfers reserved (this one's earlier parts included: an account, not an
 * allocation: fallocate would zero every page on tmpfs). 0, or -ENOSPC with the figures in
 * <err>.
 */
static int part_reserve(struct xfer_server *s, struct rx_transfer *rx, uint32_t from, uint32_t to,
			char *err, size_t errlen)
{
	uint64_t need = 0;
	for (uint32_t i = from; i < to; i++) /* saturating: a peer picks the sizes */
		need = rx_file(rx, i)->reserve > UINT64_MAX - need ? UINT64_MAX
								   : need + rx_file(rx, i)->reserve;
	struct statvfs v;
	if (fstatvfs(s->dirfd, &v) < 0)
		return 0; /* no figures: the writes will tell */
	uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	if (need > avail || s->reserved > avail - need) {
		snprintf(err, errlen,
			 "not enough space: the transfer needs %.1f MiB more, %.1f MiB are free "
			 "and %.1f MiB "
			 "of that are reserved by transfers in progress",
			 (double)need / 1048576, (double)avail / 1048576,
			 (double)s->reserved / 1048576);
		rc = -ENOSPC;
	} else {
		s->reserved += need;
		rx->reserved += need;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/*
 * bcast: files [from, to) as the relay's engine sends them, from this receiver's parts (each
 * acquired and mapped, and pinned until the transfer ends): their manifest entries in
 * *files and sources in *src (both malloc'd). 0, or -errno with the reason in <err>.
 */
static int relay_sources(struct xfer_server *s, struct rx_transfer *rx, uint32_t from, uint32_t to,
			 struct xfer_file **files, struct xfer_source **src, char *err,
			 size_t errlen)
{
	const char *why = NULL;
	uint32_t n = to - from;
	for (uint32_t i = from; i < to; i++) {
		int rc = xfer_store_acquire(s->dirfd, rx_file(rx, i), &why);
		if (!rc && (rc = xfer_store_map(rx_file(rx, i))))
			why = "cannot map a partial file";
		if (rc) {
			snprintf(err, errlen, "'%s': %s: %s", rx_file(rx, i)->path, why,
				 strerror(-rc));
			return rc;
		}
		rx_file(rx, i)->pinned = 1; /* the relay reads the map until the transfer ends */
	}
	*files = calloc(n ? n : 1, sizeof(struct xfer_file));
	*src = calloc(n ? n : 1, sizeof(struct xfer_source));
	if (!*files || !*src) {
		free(*files);
		free(*src);
		*files = NULL;
		*src = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = from; i < to; i++) {
		struct xfer_store_file *f = rx_file(rx, i);
		(*files)[i - from] = rx_entry(rx, i)->mf;
		(*src)[i - from] =
		    (struct xfer_source){.fd = f->part_fd, .buf = f->map, .size = f->size};
	}
	return 0;
}

/* bcast: the chunks of files [from, to) this receiver has already (a resume) go to the relay. */
static void relay_feed_done(struct rx_transfer *rx, uint32_t from, uint32_t to)
{
	for (uint32_t f = from; f < to; f++)
		for (uint32_t k = 0; k < rx_file(rx, f)->nchunks; k++)
			if (rx_file(rx, f)->done[k])
				xfer_engine_feed(rx->relay, f, k, rx_file(rx, f)->hashes[k], 1);
}

/*
 * bcast: forward files [from, to), the part just taken, to the next hop: the first part starts
 * the engine to it (with the remaining hops), each later one is listed to it as it arrives (the
 * last waits until the next hop answered every part), so the next hop starts writing while this
 * one's manifest is still coming. Its chunks go on as they are written here (chunk_write).
 */
static int transfer_relay(struct xfer_server *s, struct rx_transfer *rx, uint32_t from, uint32_t to,
			  int last, int tls, char *err, size_t errlen)
{
	struct xfer_file *files = NULL;
	struct xfer_source *src = NULL;
	struct xfer_report rep;
	int rc = relay_sources(s, rx, from, to, &files, &src, err, errlen);
	if (rc)
		return rc;
	if (from == 0) {
		rx->relay_m = rx->m;
		rx->relay_m.nfwd = rx->m.nfwd - 1;
		rx->relay_m.nfiles = to;
		rx->relay_m.last = (uint8_t)last;
		memmove(rx->relay_m.fwd, rx->m.fwd + 1, rx->relay_m.nfwd * sizeof(char *));
		rx->relay_m.files = files;
		files = NULL;
		struct xfer_send_opts o = {
		    .remote = rx->m.fwd[0],
		    .bcast = (const char *const *)rx->relay_m.fwd,
		    .nbcast = rx->relay_m.nfwd,
		    .token_file = s->o->token_file,
		    /* a chain that came in over TLS goes on over TLS, this node's certificate its
		     * own */
		    .tls = tls,
		    .tls_ca = s->o->tls_ca,
		    .tls_cert = s->o->tls_cert,
		    .tls_key = s->o->tls_key,
		    .numa_off = s->o->numa_off,
		    /* the next hop's answers to the parts have this serve's frame deadline */
		    .frame_ms = s->o->frame_ms,
		    .min_rate_kib = s->o->min_rate_kib,
		};
		rc = xfer_engine_start(&o, NULL, rx->hop, rx->nhop, &rx->relay_m, src,
				       XFER_ENGINE_RELAY | (last ? 0 : XFER_ENGINE_MORE),
				       &rx->relay, &rep);
	} else {
		struct xfer_manifest p = {
		    .nfiles = to - from, .files = files, .last = (uint8_t)last};
		rc = xfer_engine_list(rx->relay, &p, src, &rep);
	}
	free(files);
	free(src);
	if (rc) {
		snprintf(err, errlen, "next bcast hop %s: %s", rx->m.fwd[0], rep.error);
		return rc;
	}
	relay_feed_done(rx, from, to);
	return 0;
}

/* NEED for files [from, to): the chunks of each that the receiver still lacks. */
static int reply_need(struct xfer_server_conn *c, uint32_t from, uint32_t to)
{
	struct rx_transfer *rx = c->rx;
	uint64_t total = 0;
	for (uint32_t f = from; f < to; f++)
		total += rx_file(rx, f)->nchunks;
	struct xfer_manifest view = {
	    .chunk_size = rx->m.chunk_size,
	    .nfiles = to - from,
	    .files = malloc((to - from ? to - from : 1) * sizeof(struct xfer_file))};
	uint8_t *needed = malloc(total ? total : 1), *need = NULL, *p = needed;
	size_t len;
	int rc = -ENOMEM;
	if (!needed || !view.files)
		goto out;
	pthread_mutex_lock(&rx->mu);
	for (uint32_t f = from; f < to; f++) {
		view.files[f - from] = rx_entry(rx, f)->mf;
		for (uint32_t k = 0; k < rx_file(rx, f)->nchunks; k++)
			*p++ = !rx_file(rx, f)->done[k];
	}
	pthread_mutex_unlock(&rx->mu);
	rc = xfer_need_encode(&view, needed, &need, &len);
	if (!rc)
		rc = xfer_frame_send(&c->io, XFER_NEED, need, (uint32_t)len);
out:
	free(view.files);
	free(needed);
	free(need);
	return rc;
}

/* The transfer a HELLO named, with a reference for the caller, or NULL. */
static struct rx_transfer *transfer_get(struct xfer_server *s, const uint8_t id[XFER_SESSION_LEN])
{
	pthread_mutex_lock(&s->mu);
	struct rx_transfer *found = NULL;
	for (struct list_node *n = list_first(&s->transfers); n && !found;
	     n = list_next(&s->transfers, n)) {
		struct rx_transfer *rx = container_of(n, struct rx_transfer, node);
		if (!memcmp(rx->id, id, XFER_SESSION_LEN))
			found = rx;
	}
	if (found)
		found->refs++;
	pthread_mutex_unlock(&s->mu);
	return found;
}

/*
 * A part of the manifest, decoded into <p>, for the transfer <rx>: admitted (part_admit), its
 * files looked at and their space reserved, then published to CHUNK and BATCH (rx->listed) and
 * answered with their NEED. A bcast relay forwards the part to its next hop first.
 * 0, or -errno with the reason in <err> (the files it took stay in the table, unpublished, until
 * the transfer is freed).
 */
static int part_take(struct xfer_server_conn *c, struct rx_transfer *rx, struct xfer_manifest *p,
		     char *err, size_t errlen)
{
	struct xfer_server *s = c->srv;
	uint32_t from = rx->m.nfiles, to = from + p->nfiles;
	uint64_t bytes = rx->listed_bytes;
	int last = p->last, rc;
	if ((rc = part_admit(s, rx, p, err, errlen)) ||
	    (rc = part_open(s, rx, from, to, err, errlen)) ||
	    (rc = part_reserve(s, rx, from, to, err, errlen)))
		return rc;
	pthread_mutex_lock(&rx->mu);
	rx->m.nfiles = to;
	rx->complete = last;
	if (last) /* connections of the transfer waiting to join */
		pthread_cond_broadcast(&rx->cv);
	pthread_mutex_unlock(&rx->mu);
	if (rx->m.nfwd &&
	    (rc = transfer_relay(s, rx, from, to, last, c->io.ssl != NULL, err, errlen)))
		return rc;
	atomic_store_explicit(&rx->listed, to, memory_order_release);
	s->total_bytes += rx->listed_bytes - bytes;
	return 0;
}

/*
 * MANIFEST: the first part opens the transfer named by the HELLO's session id, and this
 * connection carries the next parts; another connection naming a transfer whose manifest is
 * complete gets the NEED of all its files (a sender trying its next link).
 */
static int on_manifest(struct xfer_server_conn *c, const struct xfer_hello *hello, uint8_t *meta,
		       uint32_t len)
{
	struct xfer_server *s = c->srv;
	struct rx_transfer *rx = c->rx;
	struct xfer_manifest p;
	const char *why;
	char err[512];
	int first = 0;
	if (rx && (rx->lister != c || rx->complete)) {
		xfer_server_refuse(s, &c->io,
				   rx->lister != c ? "a connection sends one manifest"
						   : "bad manifest: a part after the last one");
		return -EPROTO;
	}
	if (!rx && (rx = transfer_get(s, hello->session))) {
		c->rx = rx;
		/* a link that came up while the first connection's manifest is still being taken
		 * (xfer get's connections all dial at once): wait for its last part, a while */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += RX_JOIN_WAIT_S;
		pthread_mutex_lock(&rx->mu);
		while (!rx->complete && !pthread_cond_timedwait(&rx->cv, &rx->mu, &until))
			;
		int complete = rx->complete;
		pthread_mutex_unlock(&rx->mu);
		if (!complete) {
			xfer_server_refuse(s, &c->io,
					   "the transfer's manifest is still coming on another "
					   "connection");
			return -EPROTO;
		}
		return reply_need(c, 0, rx->m.nfiles);
	}
	if (!rx) {
		first = 1;
		if (!(rx = calloc(1, sizeof(*rx))))
			return -ENOMEM;
		pthread_mutex_init(&rx->mu, NULL);
		pthread_cond_init(&rx->cv, NULL);
		list_init(&rx->writers);
		xfer_table_init(&rx->files, sizeof(struct rx_file));
		memcpy(rx->id, hello->session, XFER_SESSION_LEN);
		rx->refs = 1;
		rx->lister = c;
	}
	uint32_t room = s->max_files - (rx->m.nfiles < s->max_files ? rx->m.nfiles : s->max_files);
	int drc = xfer_manifest_decode(meta, len, room, &p, &why);
	if (drc == -E2BIG) {
		snprintf(err, sizeof(err),
			 "too many files in one transfer (at most %u: serve --max-files)",
			 s->max_files);
		goto refuse;
	} else if (drc) {
		snprintf(err, sizeof(err), "bad manifest: %s", why);
		goto refuse;
	}
	if (first) {
		rx->m.chunk_size = p.chunk_size;
		rx->m.nfwd = p.nfwd; /* the hops move to the transfer */
		memcpy(rx->m.fwd, p.fwd, sizeof(p.fwd));
		p.nfwd = 0;
	}
	const char *bad = !first && p.chunk_size != rx->m.chunk_size
			      ? "its parts disagree on the chunk size"
			  : !first && p.nfwd	 ? "bcast hops come in its first part only"
			  : !p.last && !p.nfiles ? "a part other than the last lists no file"
						 : NULL;
	if (bad) {
		snprintf(err, sizeof(err), "bad manifest: %s", bad);
		xfer_manifest_free(&p);
		goto refuse;
	}
	if (first && rx->m.nfwd &&
	    (rx->nhop = relay_allowed(s, rx->m.fwd[0], rx->hop, err, sizeof(err))) < 0) {
		xfer_manifest_free(&p);
		goto refuse;
	}
	uint32_t from = rx->m.nfiles;
	if (part_take(c, rx, &p, err, sizeof(err)))
		goto refuse;
	atomic_fetch_add(&s->parts, 1);
	if (first) {
		pthread_mutex_lock(&s->mu);
		list_push_front(&s->transfers, &rx->node);
		pthread_mutex_unlock(&s->mu);
		atomic_fetch_add(&s->m_sessions, 1);
		c->rx = rx;
	}
	return reply_need(c, from, rx->m.nfiles);
refuse:
	atomic_fetch_add(&s->m_errors, 1);
	xfer_server_refuse(s, &c->io, err);
	if (first)
		transfer_free(s, rx, 1);
	return -EINVAL;
}

/*
 * A chunk this connection writes (it is listed as <me>): read it into its part, or off the
 * wire when another transfer verified it already; check its hash and mark it. Sets a->status
 * (and *why when it is XFER_ACK_IO). Returns the error behind XFER_ACK_IO, the connection's
 * error with *lost set when it failed mid-chunk, or 0.
 */
/* A plain socket's receive low-water mark while a chunk is read (see read_piece). */
struct lowat {
	int fd;
	int now;     /* the mark set on the socket */
	int wait_ms; /* the socket's receive timeout; -1 until read */
	int cap;     /* the highest mark that leaves the receive buffer as it is */
};

/*
 * Read <n> bytes of a chunk from a plain socket with one wake-up: the low-water mark is set to
 * what is still wanted and the thread sleeps in poll() until that much has arrived, then takes
 * it in one receive. A blocking receive of <n> bytes is woken by every segment (the scheduler
 * then cost a third of the receiver's CPU). The bytes wanted always come (the sender writes
 * whole chunks), and nothing is taken before they are all there: a read that had taken part
 * of them would wait for a mark of new bytes beyond the chunk, which need not come. The
 * kernel wakes a reader early anyway when its receive window closes. A mark above half the
 * receive buffer would make the kernel grow the buffer and clamp the window to the mark (a
 * cap on the stream's rate on a long link), so the mark stays at a quarter of the buffer,
 * as autotuning has grown it, and a piece may take a few wake-ups. 0, or -errno
 * (-ETIMEDOUT after the socket's receive timeout, -ECONNRESET at the end of the stream).
 */
static int read_piece(struct lowat *lw, uint8_t *buf, uint32_t n)
{
	if (lw->wait_ms < 0) {
		struct timeval tv = {0};
		socklen_t tl = sizeof(tv);
		lw->wait_ms = getsockopt(lw->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0 &&
				      (tv.tv_sec || tv.tv_usec)
				  ? (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000)
				  : -1;
		if (lw->wait_ms < 0)
			lw->wait_ms = XFER_SERVER_IDLE_MS;
		int room = 0;
		socklen_t rl = sizeof(room);
		lw->cap = getsockopt(lw->fd, SOL_SOCKET, SO_RCVBUF, &room, &rl) == 0 && room >= 8
			      ? room / 4
			      : 1;
	}
	for (uint32_t got = 0; got < n;) {
		int want = (int)(n - got) < lw->cap ? (int)(n - got) : lw->cap;
		if (lw->now != want &&
		    setsockopt(lw->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
			lw->now = want;
		struct pollfd p = {.fd = lw->fd, .events = POLLIN};
		int r = poll(&p, 1, lw->wait_ms);
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r < 0)
			continue;
		ssize_t k = recv(lw->fd, buf + got, n - got, MSG_DONTWAIT);
		if (k == 0)
			return -ECONNRESET;
		if (k < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (k > 0)
			got += (uint32_t)k;
	}
	return 0;
}

/* Frame heads are read with the usual mark of one byte. */
static void lowat_reset(struct lowat *lw)
{
	int one = 1;
	if (lw->now != 1 && setsockopt(lw->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0)
		lw->now = 1;
}

/*
 * Read a chunk of <len> bytes from <c> into the part <fd> at <off>, a piece at a time through
 * <piece> (RX_HASH_PIECE bytes, woken once or a few times each: see read_piece; on a slow
 * link, a read per arrival cost about 1.4 times the CPU), hashing each piece while it is
 * still in the CPU's cache: one copy
 * from the socket, one from the piece into the page cache with pwrite. Receiving
 * into the shared map instead faulted its pages in and dropped them again, and every map
 * change of a process with many threads interrupts every CPU it runs on to flush their TLBs
 * (most of the receiver's CPU, measured). With <corrupt>, one byte in the middle is flipped
 * before it is hashed (fault injection for tests). 0 with *hash; the read's -errno, *wrote
 * 0; or the write's -errno (-ENOSPC: the disk is full), *wrote 1, with the whole chunk read.
 * With <mem> (a chunk WRITTEN into the loopback stand-in's region), the bytes come from there.
 */
static int read_hashed(struct net_conn *c, const uint8_t *mem, uint8_t *piece, int fd, uint64_t off,
		       uint32_t len, int corrupt, uint64_t *hash, int *wrote)
{
	XXH3_state_t st;
	int err = 0; /* a failed write: the rest of the chunk is still read, off the wire */
	struct lowat lw = {.fd = c->fd, .now = 1, .wait_ms = -1};
	XXH3_64bits_reset(&st);
	*wrote = 0;
	for (uint32_t at = 0; at < len;) {
		uint32_t n = len - at < RX_HASH_PIECE ? len - at : RX_HASH_PIECE;
		int rc = 0;
		if (mem) /* the loopback stand-in's region: copied out before it is hashed */
			memcpy(piece, mem + at, n);
		else
			rc = c->ssl || n < RX_LOWAT_MIN ? net_conn_read_all(c, piece, n)
							: read_piece(&lw, piece, n);
		if (rc) {
			lowat_reset(&lw);
			return rc;
		}
		if (corrupt && len / 2 >= at && len / 2 < at + n)
			piece[len / 2 - at] ^= 0x5a;
		XXH3_64bits_update(&st, piece, n);
		for (uint32_t done = 0; done < n && !err;) {
			ssize_t w = pwrite(fd, piece + done, n - done, (off_t)(off + at + done));
			if (w <= 0)
				err = w < 0 ? -errno : -EIO;
			else
				done += (uint32_t)w;
		}
		at += n;
	}
	lowat_reset(&lw);
	*hash = XXH3_64bits_digest(&st);
	*wrote = err != 0;
	return err;
}

static int chunk_write(struct xfer_server_conn *c, struct writer *me, struct xfer_store_file *f,
		       struct xfer_chunk_meta *cm, uint32_t want, const uint8_t *mem,
		       struct xfer_ack *a, const char **why, int *lost)
{
	struct xfer_server *s = c->srv;
	struct rx_transfer *rx = c->rx;
	int rc = 0;
	uint64_t have = 0, got = 0;
	int wrote = 0;
	int first = 0, verified = xfer_store_verified(f, cm->chunk, &have);
	int corrupt = !verified && s->corrupt_every &&
		      atomic_fetch_add(&s->corrupt_seq, 1) % s->corrupt_every == 0;
	if (verified) {
		/* verified by another transfer of the file: keep its bytes, count its hash */
		rc = mem ? 0 : xfer_discard(&c->io, want);
		if (rc)
			*lost = 1;
		else if (verified < 0) {
			rc = verified;
			a->status = XFER_ACK_IO;
			*why = "cannot read its state";
		} else {
			atomic_fetch_add(&s->m_bytes, want);
			cm->hash = have;
		}
	} else if ((rc = read_hashed(&c->io, mem, c->piece, f->part_fd,
				     (uint64_t)cm->chunk * f->chunk_size, want, corrupt, &got,
				     &wrote)) &&
		   wrote) {
		a->status = XFER_ACK_IO; /* the write failed: a full disk, most likely */
		*why = rc == -ENOSPC ? "no space left" : "cannot write it";
	} else if (rc) {
		*lost = 1; /* the connection failed mid-chunk */
	} else {
		atomic_fetch_add(&s->m_bytes, want);
		if (got != cm->hash) {
			a->status = XFER_ACK_BAD;
			atomic_fetch_add(&s->m_bad, 1);
		} else if ((rc = xfer_store_record(f, cm->chunk, cm->hash))) {
			a->status = XFER_ACK_IO;
			*why = "cannot record it";
		}
	}
	pthread_mutex_lock(&rx->mu);
	list_del(&rx->writers, &me->node);
	f->writers[cm->chunk]--;
	f->busy--;
	if (!*lost && a->status == XFER_ACK_OK && verified > 0) {
		first = !f->done[cm->chunk] && xfer_store_mark(f, cm->chunk, cm->hash);
		a->status = XFER_ACK_DUP;
	} else if (!*lost && a->status == XFER_ACK_OK) {
		first = xfer_store_mark(f, cm->chunk, cm->hash);
		if (!first)
			a->status = XFER_ACK_DUP;
	}
	/* every chunk there: no descriptor until FINISH; or the transfer holds too many files
	 * between their chunks (a sender may start thousands): this one is opened again */
	if (!f->busy && f->part_fd >= 0 && !f->pinned &&
	    (f->ndone == f->nchunks || rx->held > RX_HELD_MAX)) {
		xfer_store_release(f);
		rx->held--;
	}
	pthread_cond_broadcast(&rx->cv);
	pthread_mutex_unlock(&rx->mu);
	if (*lost)
		return rc;
	if (first) {
		atomic_fetch_add(&s->m_chunks, 1);
		atomic_fetch_add(&s->link_bytes[c->link % XFER_LINKS_MAX], want);
		pthread_mutex_lock(&s->mu);
		unreserve_locked(s, rx, want);
		pthread_mutex_unlock(&s->mu);
		if (rx->relay)
			xfer_engine_feed(rx->relay, cm->file, cm->chunk, cm->hash, 1);
	} else if (a->status == XFER_ACK_DUP) {
		atomic_fetch_add(&s->m_dup, 1);
		atomic_fetch_add(&s->m_dup_bytes, want);
	}
	return rc;
}

/* A file of <rx> could not be written (<why>, -errno <rc>): the transfer ends, its tomb and
 * the peer told so. <rc>. */
static int write_failed(struct xfer_server_conn *c, struct rx_transfer *rx, const char *path,
			const char *why, int rc)
{
	struct xfer_server *s = c->srv;
	char msg[200];
	snprintf(msg, sizeof(msg), "cannot write '%.100s': %s: %s", path, why, strerror(-rc));
	pthread_mutex_lock(&s->mu);
	xfer_server_tomb_add_locked(s, rx->id, msg);
	pthread_mutex_unlock(&s->mu);
	xfer_server_refuse(s, &c->io, msg);
	return rc;
}

/* The transfer <c> works for (looked up once a connection): NULL, refused with why (the
 * tomb of one that ended says how), when there is none. */
static struct rx_transfer *conn_transfer(struct xfer_server_conn *c, const struct xfer_hello *hello)
{
	struct xfer_server *s = c->srv;
	if (!c->rx)
		c->rx = transfer_get(s, hello->session);
	if (!c->rx) {
		char why[200] = "no such transfer (the receiver restarted?)";
		pthread_mutex_lock(&s->mu);
		xfer_server_tomb_find_locked(s, hello->session, why, sizeof(why));
		pthread_mutex_unlock(&s->mu);
		xfer_server_refuse(s, &c->io, why);
	}
	return c->rx;
}

/*
 * A chunk (CHUNK: <h>'s data follows on the socket; WRITTEN: it lies in <region> at <roff>,
 * checked against the region before anything is read).
 */
static int on_chunk(struct xfer_server_conn *c, const struct xfer_hello *hello, const uint8_t *meta,
		    const struct xfer_hdr *h, const struct xfer_rx_region *region)
{
	struct xfer_server *s = c->srv;
	struct rx_transfer *rx = conn_transfer(c, hello);
	struct xfer_chunk_meta cm;
	uint64_t roff = 0;
	const uint8_t *mem = NULL;
	if (!rx)
		return -EPROTO;
	if ((region ? xfer_written_decode(meta, h->meta_len, &cm, &roff)
		    : xfer_chunk_decode(meta, h->meta_len, &cm)) ||
	    cm.file >= atomic_load_explicit(&rx->listed, memory_order_acquire) ||
	    cm.chunk >= rx_file(rx, cm.file)->nchunks) {
		xfer_server_refuse(s, &c->io, "chunk outside the manifest");
		return -EPROTO;
	}
	struct xfer_store_file *f = rx_file(rx, cm.file);
	uint32_t want = xfer_store_chunk_len(f, cm.chunk);
	if (region && xfer_region_bytes(region, roff, want, &mem)) {
		xfer_server_refuse(s, &c->io, "chunk written outside the region");
		return -EPROTO;
	}
	if (!region && h->data_len != want) {
		xfer_server_refuse(s, &c->io, "chunk has the wrong length");
		return -EPROTO;
	}
	struct xfer_ack a = {.file = cm.file, .chunk = cm.chunk, .status = XFER_ACK_OK};
	const char *why = "";
	int rc = 0, mine = 0, crowded = 0;
	struct writer me;
	/* a chunk already verified is never written again, by this transfer (done[]) or any
	 * other (the state on disk, asked once the lock is held: see store.h); one being written
	 * gets a second writer only as an end-game copy would, and is re-hashed before the rename
	 */
	pthread_mutex_lock(&rx->mu);
	crowded = !f->done[cm.chunk] && f->writers[cm.chunk] == UINT8_MAX;
	int held = f->part_fd >= 0;
	if (!f->done[cm.chunk] && !crowded && !(rc = xfer_store_acquire(s->dirfd, f, &why))) {
		mine = 1;
		rx->held += !held && !f->pinned;
		if (++f->writers[cm.chunk] > 1)
			f->multi[cm.chunk] = 1;
		f->busy++;
		me = (struct writer){.fd = c->io.fd, .file = cm.file, .chunk = cm.chunk};
		list_push_front(&rx->writers, &me.node);
	}
	pthread_mutex_unlock(&rx->mu);
	if (crowded) {
		xfer_server_refuse(s, &c->io, "too many copies of one chunk at once");
		return -EPROTO;
	}
	if (!mine) {
		/* a copy from the end game or a resend: read it off the wire, keep what we have */
		int drc = mem ? 0 : xfer_discard(&c->io, want);
		if (drc)
			return drc;
		atomic_fetch_add(&s->m_bytes, want);
		if (rc) {
			a.status = XFER_ACK_IO;
		} else {
			a.status = XFER_ACK_DUP;
			atomic_fetch_add(&s->m_dup, 1);
			atomic_fetch_add(&s->m_dup_bytes, want);
		}
	} else {
		int lost = 0;
		rc = chunk_write(c, &me, f, &cm, want, mem, &a, &why, &lost);
		if (lost)
			return rc;
	}
	xfer_server_frame_end(c); /* its bytes are in: the answer is ours */
	if (a.status == XFER_ACK_IO)
		atomic_fetch_add(&s->m_errors, 1);
	uint8_t out[XFER_ACK_LEN];
	xfer_ack_encode(out, &a);
	int wrc = xfer_frame_send(&c->io, XFER_ACK, out, sizeof(out));
	if (a.status == XFER_ACK_IO)
		return write_failed(c, rx, f->path, why, rc);
	return wrc;
}

/* A BATCH's data, whole, into <buf> (at most XFER_BATCH_BYTES): 0 or -errno. */
static int read_batch(struct net_conn *c, uint8_t *buf, uint32_t len)
{
	struct lowat lw = {.fd = c->fd, .now = 1, .wait_ms = -1};
	int rc = c->ssl || len < RX_LOWAT_MIN ? net_conn_read_all(c, buf, len)
					      : read_piece(&lw, buf, len);
	lowat_reset(&lw);
	return rc;
}

/*
 * One file of a batch, its bytes at <data>: put whole in place unless this transfer has it
 * already (XFER_ACK_DUP) or the bytes do not match the sender's hash (XFER_ACK_BAD). While it
 * is written the file counts as busy, so FINISH waits for it. 0 with the status, or the
 * write's -errno (status XFER_ACK_IO, *why set).
 */
static int batch_put(struct xfer_server_conn *c, const struct xfer_batch_file *bf,
		     const uint8_t *data, struct xfer_store_dirs *dirs, uint8_t *status,
		     const char **why)
{
	struct xfer_server *s = c->srv;
	struct rx_transfer *rx = c->rx;
	struct xfer_store_file *f = rx_file(rx, bf->file);
	int rc = 0, first = 0;
	*status = XFER_ACK_OK;
	int corrupt = s->corrupt_every && /* fault injection for tests, as for a chunk */
		      atomic_fetch_add(&s->corrupt_seq, 1) % s->corrupt_every == 0;
	if (corrupt || XXH3_64bits(data, bf->len) != bf->hash) {
		*status = XFER_ACK_BAD;
		atomic_fetch_add(&s->m_bad, 1);
		return 0;
	}
	pthread_mutex_lock(&rx->mu);
	int have = f->done[0]; /* a chunk's writer may be at it too: both land whole */
	int crowded = !have && f->writers[0] == UINT8_MAX;
	if (!have && !crowded) {
		f->writers[0]++;
		f->busy++;
	}
	pthread_mutex_unlock(&rx->mu);
	if (crowded) {
		*status = XFER_ACK_IO;
		*why = "too many copies of one file at once";
		return -EPROTO;
	}
	if (have) {
		*status = XFER_ACK_DUP;
		atomic_fetch_add(&s->m_dup, 1);
		atomic_fetch_add(&s->m_dup_bytes, bf->len);
		return 0;
	}
	rc = xfer_store_put_whole(s->dirfd, f, data, dirs, why);
	pthread_mutex_lock(&rx->mu);
	f->writers[0]--;
	f->busy--;
	if (rc) {
		*status = XFER_ACK_IO;
	} else {
		/* FINISH compares its whole hash, as for a file found in place, and removes a
		 * part that an end-game CHUNK copy of it created meanwhile (store.c, part_drop) */
		first = xfer_store_mark(f, 0, bf->hash);
		f->in_place = 1;
		/* renamed unsynced, even when a chunk's copy was counted first: synced before
		 * DONE. Counted before the wake-up, under mu: a FINISH woken by it must see it */
		atomic_fetch_add(&rx->batched, 1);
	}
	pthread_cond_broadcast(&rx->cv);
	pthread_mutex_unlock(&rx->mu);
	if (first) {
		atomic_fetch_add(&s->m_chunks, 1);
		atomic_fetch_add(&s->link_bytes[c->link % XFER_LINKS_MAX], bf->len);
		pthread_mutex_lock(&s->mu);
		unreserve_locked(s, rx, bf->len);
		pthread_mutex_unlock(&s->mu);
	}
	return rc;
}

/*
 * BATCH: small files whole, each checked against the manifest (a file of one chunk, of the
 * length announced) before a byte of data is read; the data is read whole, then each file is
 * verified and put in place (xfer_store_put_whole: no part, no state, no lock, no fsync), and
 * one BATCH_ACK answers for all. A bcast relay sends from its parts, so a transfer with further
 * hops takes no batch. A failed write ends the transfer as for a CHUNK.
 */
static int on_batch(struct xfer_server_conn *c, const struct xfer_hello *hello, const uint8_t *meta,
		    const struct xfer_hdr *h)
{
	struct xfer_server *s = c->srv;
	struct rx_transfer *rx = conn_transfer(c, hello);
	struct xfer_batch b;
	const char *why = "";
	char msg[300];
	if (!rx)
		return -EPROTO;
	if (xfer_batch_decode(meta, h->meta_len, h->data_len, &b, &why)) {
		snprintf(msg, sizeof(msg), "bad batch: %s", why);
		xfer_server_refuse(s, &c->io, msg);
		return -EPROTO;
	}
	if (rx->m.nfwd) {
		xfer_server_refuse(s, &c->io, "bad batch: a bcast relay takes no batch");
		return -EPROTO;
	}
	uint32_t listed = atomic_load_explicit(&rx->listed, memory_order_acquire);
	for (uint32_t i = 0; i < b.count; i++) {
		uint32_t fi = b.f[i].file;
		if (fi >= listed || rx_file(rx, fi)->nchunks != 1 ||
		    rx_file(rx, fi)->size != b.f[i].len) {
			snprintf(msg, sizeof(msg),
				 "bad batch: file %u is not in the manifest as a file of %u bytes",
				 fi, b.f[i].len);
			xfer_server_refuse(s, &c->io, msg);
			return -EPROTO;
		}
	}
	if (!c->batch && !(c->batch = malloc(XFER_BATCH_BYTES)))
		return -ENOMEM;
	int rc = read_batch(&c->io, c->batch, h->data_len);
	if (rc)
		return rc;
	xfer_server_frame_end(c); /* its bytes are in: putting the files in place is ours */
	atomic_fetch_add(&s->m_bytes, h->data_len);
	atomic_fetch_add(&s->m_batches, 1);
	struct xfer_store_dirs dirs = XFER_STORE_DIRS_INIT;
	const uint8_t *data = c->batch;
	uint32_t failed = UINT32_MAX;
	for (uint32_t i = 0; i < b.count; data += b.f[i].len, i++) {
		if (failed != UINT32_MAX) {
			b.status[i] = XFER_ACK_IO;
			continue;
		}
		if ((rc = batch_put(c, &b.f[i], data, &dirs, &b.status[i], &why)))
			failed = i;
	}
	xfer_store_dirs_close(&dirs);
	uint8_t out[XFER_BATCH_ACK_MAX];
	int wrc =
	    xfer_frame_send(&c->io, XFER_BATCH_ACK, out, (uint32_t)xfer_batch_ack_encode(out, &b));
	if (failed != UINT32_MAX) {
		atomic_fetch_add(&s->m_errors, 1);
		return write_failed(c, rx, rx_file(rx, b.f[failed].file)->path, why, rc);
	}
	return wrc;
}

/* A share of FINISH's files: [from, to), the first failure in err (see finish_files). */
struct finish_share {
	struct xfer_server *s;
	struct rx_transfer *rx;
	const uint8_t *hashes;
	uint32_t from, to;
	_Atomic int *failed;
	pthread_t th;
	int started;
	char err[512];
};

static void *finish_range(void *arg)
{
	struct finish_share *sh = arg;
	struct xfer_store_dirs dirs = XFER_STORE_DIRS_INIT;
	for (uint32_t i = sh->from; i < sh->to && !atomic_load(sh->failed); i++) {
		struct xfer_store_file *f = rx_file(sh->rx, i);
		const char *why;
		uint32_t bad = UINT32_MAX;
		if (f->finished)
			continue;
		int rc =
		    xfer_store_finish(sh->s->dirfd, f, sh->hashes + XFER_WHOLE_HASH_LEN * (size_t)i,
				      &dirs, &bad, &why);
		if (rc && bad != UINT32_MAX)
			snprintf(sh->err, sizeof(sh->err),
				 "'%s': chunk %u was overwritten by a second writer after it was "
				 "verified; send again to resume",
				 f->path, bad);
		else if (rc)
			snprintf(sh->err, sizeof(sh->err), "'%s': %s", f->path, why);
		else
			atomic_fetch_add(&sh->s->m_files, 1);
		if (rc)
			atomic_store(sh->failed, 1);
	}
	xfer_store_dirs_close(&dirs);
	return NULL;
}

/*
 * Complete every file of <rx> (no writer left): the files are shared out, in runs of
 * consecutive files (a directory's files stay together, its descriptor opened once per run),
 * among up to RX_FINISH_THREADS threads, since each file costs a dozen system calls and two
 * fsyncs, and a tree has thousands. The first failure stops the others (files completed by
 * then are verified and in place) and is reported in <err>, the lowest file's first.
 */
static void finish_files(struct xfer_server *s, struct rx_transfer *rx, const uint8_t *hashes,
			 char *err, size_t errlen)
{
	struct finish_share sh[RX_FINISH_THREADS];
	_Atomic int failed = 0;
	uint32_t n = rx->m.nfiles;
	unsigned nth = n / RX_FINISH_RUN + 1;
	if (nth > RX_FINISH_THREADS)
		nth = RX_FINISH_THREADS;
	for (unsigned t = 0; t < nth; t++) {
		sh[t] = (struct finish_share){.s = s,
					      .rx = rx,
					      .hashes = hashes,
					      .from = (uint32_t)((uint64_t)n * t / nth),
					      .to = (uint32_t)((uint64_t)n * (t + 1) / nth),
					      .failed = &failed};
		if (t && pthread_create(&sh[t].th, NULL, finish_range, &sh[t]) == 0)
			sh[t].started = 1;
		else if (t)
			finish_range(&sh[t]); /* no thread: this one does it */
	}
	finish_range(&sh[0]);
	for (unsigned t = 1; t < nth; t++)
		if (sh[t].started)
			pthread_join(sh[t].th, NULL);
	for (unsigned t = 0; t < nth && !err[0]; t++)
		snprintf(err, errlen, "%s", sh[t].err);
}

static int on_finish(struct xfer_server_conn *c, const struct xfer_hello *hello,
		     const uint8_t *meta, uint32_t len)
{
	struct xfer_server *s = c->srv;
	if (!c->rx)
		c->rx = transfer_get(s, hello->session);
	struct rx_transfer *rx = c->rx;
	char err[512] = "";
	const uint8_t *hashes;
	int complete = 0;
	uint32_t nfiles = 0;
	if (rx) {
		pthread_mutex_lock(&rx->mu);
		complete = rx->complete;
		nfiles = rx->m.nfiles;
		pthread_mutex_unlock(&rx->mu);
	}
	if (rx && !complete) {
		xfer_server_refuse(s, &c->io, "FINISH before the manifest's last part");
		return -EPROTO;
	}
	if (!rx || xfer_finish_decode(meta, len, nfiles, &hashes)) {
		xfer_server_refuse(s, &c->io, "FINISH does not match the manifest");
		return -EPROTO;
	}
	pthread_mutex_lock(&rx->mu);
	/*
	 * The sender has every acknowledgement, so a connection still writing into a verified
	 * chunk is one it gave up (a dead link) or not the sender's: end it rather than wait for
	 * its timeout, then wait for its thread to let go of the chunk.
	 */
	for (struct list_node *n = list_first(&rx->writers); n; n = list_next(&rx->writers, n)) {
		struct writer *w = container_of(n, struct writer, node);
		if (rx_file(rx, w->file)->done[w->chunk])
			sock_abort(w->fd);
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += RX_FINISH_WAIT_S;
	for (uint32_t i = 0; i < rx->m.nfiles; i++)
		while (rx_file(rx, i)->busy)
			if (pthread_cond_timedwait(&rx->cv, &rx->mu, &until)) {
				snprintf(
				    err, sizeof(err),
				    "'%s': a chunk is still being written by another connection",
				    rx_file(rx, i)->path);
				break;
			}
	if (!err[0])
		finish_files(s, rx, hashes, err, sizeof(err));
	/* batched files were renamed into place without an fsync each: one for them all */
	if (!err[0] && atomic_load(&rx->batched) && syncfs(s->dirfd) < 0)
		snprintf(err, sizeof(err), "cannot sync the received files: %s", strerror(errno));
	if (!err[0] && rx->relay && !rx->finished) {
		struct xfer_report rep;
		if (xfer_engine_finish(rx->relay, &rep))
			snprintf(err, sizeof(err), "next bcast hop %s: %s", rx->m.fwd[0],
				 rep.error);
	}
	if (!err[0]) {
		rx->finished = 1;
		s->done_ok = 1;
	}
	pthread_mutex_unlock(&rx->mu);
	if (err[0]) {
		atomic_fetch_add(&s->m_errors, 1);
		xfer_server_refuse(s, &c->io, err);
		return -EIO;
	}
	return xfer_frame_send(&c->io, XFER_DONE, NULL, 0);
}

/* REGION: register a region for this connection's chunks and advertise it (post_recv), when
 * this receiver offers the loopback stand-in; refused otherwise, as an unknown message is. */
static int on_region(struct xfer_server_conn *c, struct xfer_rx_region *r, const uint8_t *meta,
		     uint32_t len)
{
	struct xfer_server *s = c->srv;
	struct xfer_region adv;
	uint8_t out[XFER_REGION_LEN];
	if (!xfer_region_offered() || c->io.ssl) {
		xfer_server_refuse(s, &c->io, "unexpected message");
		return -EPROTO;
	}
	if (len != XFER_REGION_ASK_LEN || xfer_region_post(r, wire_get64(meta), &adv)) {
		xfer_server_refuse(s, &c->io, "cannot register a region of that size");
		return -EPROTO;
	}
	xfer_region_encode(out, &adv);
	return xfer_frame_send(&c->io, XFER_REGION, out, sizeof(out));
}

void xfer_receiver_loop(struct xfer_server_conn *c, const struct xfer_hello *hello)
{
	struct xfer_server *s = c->srv;
	int rc = 0;
	uint8_t small[XFER_BATCH_META_MAX]; /* a BATCH's meta fits: no allocation per batch */
	struct xfer_rx_region region = {.fd = -1};
	while (rc == 0) {
		struct xfer_hdr h;
		uint8_t *meta = NULL;
		/* the frame's deadline (server.h): from its first byte, longer by its length once
		 * its header says it; over once its bytes are in (a CHUNK's and a BATCH's data:
		 * in their handlers, before the disk is written or the answer sent) */
		if ((rc = xfer_frame_wait(&c->io)))
			break;
		xfer_server_frame_begin(c);
		if ((rc = xfer_frame_recv_head(&c->io, &h)))
			break;
		xfer_server_frame_length(c, (uint64_t)h.meta_len + h.data_len);
		if ((rc = xfer_frame_recv_meta(&c->io, &h, small, sizeof(small), &meta)))
			break;
		if (!h.data_len || (h.type != XFER_CHUNK && h.type != XFER_BATCH))
			xfer_server_frame_end(c);
		switch (h.type) {
		case XFER_MANIFEST:
			rc = on_manifest(c, hello, meta, h.meta_len);
			break;
		case XFER_CHUNK: /* the piece buffer comes with the first chunk, not per connection
				  */
			if (!c->piece && !(c->piece = malloc(RX_HASH_PIECE)))
				rc = -ENOMEM;
			else
				rc = h.meta_len == XFER_CHUNK_LEN
					 ? on_chunk(c, hello, meta, &h, NULL)
					 : -EPROTO;
			break;
		case XFER_REGION: /* the loopback stand-in (transport.h), when offered */
			rc = on_region(c, &region, meta, h.meta_len);
			break;
		case XFER_WRITTEN:
			if (!region.map) {
				xfer_server_refuse(s, &c->io, "chunk written before a region");
				rc = -EPROTO;
			} else if (!c->piece && !(c->piece = malloc(RX_HASH_PIECE))) {
				rc = -ENOMEM;
			} else {
				rc = on_chunk(c, hello, meta, &h, &region);
			}
			break;
		case XFER_BATCH:
			rc = on_batch(c, hello, meta, &h);
			break;
		case XFER_FINISH:
			rc = on_finish(c, hello, meta, h.meta_len);
			break;
		case XFER_ERR:
			if (s->puller) {
				char text[sizeof(s->peer_err)];
				xfer_err_decode(meta, h.meta_len, text, sizeof(text));
				xfer_server_fail(s, text);
			}
			rc = -EPROTO;
			break;
		default:
			xfer_server_refuse(s, &c->io, "unexpected message");
			rc = -EPROTO;
		}
		xfer_server_frame_end(c); /* (a handler that ended it early did no harm) */
		if (meta != small)
			free(meta);
	}
	xfer_server_frame_end(c);
	xfer_region_close(&region);
	free(c->piece);
	free(c->batch);
	c->piece = c->batch = NULL;
}

unsigned xfer_receiver_count(struct xfer_server *s)
{
	pthread_mutex_lock(&s->mu);
	unsigned n = (unsigned)s->transfers.count;
	pthread_mutex_unlock(&s->mu);
	return n;
}
