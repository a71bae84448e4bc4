/*
 * engine.h - the sending side of a transfer: links, streams and the chunk scheduler.
 *
 * xfer_send() (send.c) and a bcast relay (receiver.c) both drive one: start it with a manifest
 * and a source per file (a descriptor sent with sendfile, memory, or a path opened while its
 * chunks are sent: source.h), feed it the chunks that
 * are ready (all at once for a sender; one by one as they arrive for a relay), then finish it:
 * wait until the receiver acknowledged every chunk, send FINISH with the whole-file hashes and
 * wait for DONE. Streams are threads (see conn.h for why).
 */
#ifndef ACCELNET_XFER_ENGINE_H
#define ACCELNET_XFER_ENGINE_H

#include "accelnet/xfer.h"
#include "xfer/source.h"
#include "xfer/wire.h"

#include <stdint.h>

struct xfer_engine;

/*
 * A server sending on connections its client opened (`xfer get`): instead of dialing, each
 * stream takes one with take(), which blocks until one comes (0, with the connection and the
 * link it came in on) or answers -1 when no more will. Handshakes (TLS too) are done by then.
 * The engine gives every connection it took back through put(), which closes it (and sets
 * io->fd to -1), so the lender counts it until it is closed.
 */
struct net_conn;
struct xfer_adopt {
	int (*take)(void *arg, unsigned *link, struct net_conn *io);
	void (*put)(void *arg, struct net_conn *io);
	void *arg;
	unsigned nlinks;
	const char *names[XFER_LINKS_MAX];
	unsigned max_streams;
};

/*
 * Connect to the first live link (or adopt the first connection, with <ad>), send <m> (its files
 * are copied, their paths borrowed until xfer_engine_free), read NEED, and start the streams.
 * With XFER_ENGINE_MORE in <flags>, <m> is the first part of a streamed manifest: the next ones
 * follow through xfer_engine_list on the same connection (stream 0's, which carries chunks between
 * them, as the other streams do). <src> has one entry per file (copied). <links> (<nlinks> of
 * them), when not NULL, are o->remote already parsed and resolved: the engine dials those very
 * addresses (a bcast relay checked them against
 * --relay-to; resolving the names again could give others). 0, or -errno with rep->error set.
 */
struct xfer_path;
int xfer_engine_start(const struct xfer_send_opts *o, const struct xfer_adopt *ad,
		      const struct xfer_path *links, int nlinks, const struct xfer_manifest *m,
		      const struct xfer_source *src, unsigned flags, struct xfer_engine **out,
		      struct xfer_report *rep);
/* XFER_ENGINE_RELAY: chunks are fed one by one as they arrive (xfer_engine_feed); each goes out
 * once it is fed and its part answered, whichever comes last. */
#define XFER_ENGINE_MORE 1 /* more parts of the manifest follow (xfer_engine_list) */
#define XFER_ENGINE_RELAY 2
/*
 * The next part <p> of a streamed manifest (p->last: the last one; the engine sets its totals),
 * its files numbered after those listed before, with <src> (one entry per file, copied; paths
 * borrowed): queued for stream 0, which sends it between its chunks, reads its NEED and feeds
 * its chunks (up to XFER_PARTS_AHEAD parts wait for theirs: past that, this waits). The last
 * part returns once every part is answered. 0, or -errno with rep->error set (the
 * transfer has failed: finish or free the engine).
 */
int xfer_engine_list(struct xfer_engine *e, struct xfer_manifest *p, const struct xfer_source *src,
		     struct xfer_report *rep);
/* Chunk <k> of file <f> is ready to send; <hash> is its XXH3-64 when <known>, else computed
 * from the source's memory when sent. */
void xfer_engine_feed(struct xfer_engine *e, uint32_t f, uint32_t k, uint64_t hash, int known);
/* While listing: call the progress callback (o->progress) if it is due. */
void xfer_engine_tick(struct xfer_engine *e, struct xfer_report *rep);
/* Every chunk of files [0, nfiles) is ready to send (hashes computed when sent), fed at once:
 * 0 or -ENOMEM. */
int xfer_engine_feed_files(struct xfer_engine *e, uint32_t nfiles);
/* Give up (a relay whose upstream went away): streams stop. */
void xfer_engine_abort(struct xfer_engine *e, int err, const char *why);
/* Wait for every chunk, then FINISH and DONE. 0, or -errno with rep->error set. The report is
 * completed either way. */
int xfer_engine_finish(struct xfer_engine *e, struct xfer_report *rep);
void xfer_engine_free(struct xfer_engine *e);

#endif
