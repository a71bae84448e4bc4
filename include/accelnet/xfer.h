/*
 * accelnet/xfer.h - bulk transfer between nodes over many TCP streams and several links.
 *
 * The public API of `accelnet xfer`; the CLI is built on it. A sender pushes files and memory
 * buffers to a receiver (xfer_serve(), or `accelnet xfer serve`) over every link given, each
 * link carrying several streams. Files are cut into chunks that streams take as they have
 * room, so faster links carry more; every chunk is hashed (XXH3-64) and checked on arrival,
 * every file as a whole before it is renamed into place; a transfer interrupted and started
 * again sends only what the receiver does not have verified; a link that dies or stalls has
 * its chunks sent on the others. Functions return 0 or -errno; a report says what happened.
 *
 * Thread-safety: each call runs its own threads and shares nothing with other calls.
 */
#ifndef ACCELNET_XFER_H
#define ACCELNET_XFER_H

#include <stddef.h>
#include <stdint.h>

#define XFER_LINKS_MAX 16
#define XFER_SEND_STREAMS 4	 /* streams per link */
#define XFER_SEND_CHUNK_KIB 1024 /* chunk size */
#define XFER_SEND_STALL_MS 5000	 /* no progress for this long: the stream is lost */

/* One thing to send: a file (<path>) or a memory buffer (<buf>, <len>), stored as <name>
 * (a relative path) on the receiver. A buffer must stay untouched until xfer_send returns. */
struct xfer_item {
	const char *name;
	const char *path;
	const void *buf;
	uint64_t len;
};

struct xfer_link_report {
	char local[64], remote[64];
	uint64_t bytes;	 /* acknowledged chunk bytes carried by this link */
	uint64_t sent;	 /* chunk bytes written to its sockets: beyond <bytes>, wasted */
	unsigned dups;	 /* end-game copies it carried */
	double gbps;	 /* recent goodput (progress) or the average (final report) */
	unsigned up;	 /* streams connected now */
	unsigned failed; /* streams lost (stall, reset) */
	char iface[16];	 /* the interface it leaves by ("": not known) */
	int numa_node;	 /* that interface's NUMA node, -1: not shown */
	char cpus[128];	 /* the CPUs its stream threads run on, as "0-3,8" ("": not pinned) */
};

struct xfer_report {
	uint64_t bytes_total;	/* every item's size */
	uint64_t bytes_skipped; /* already verified on the receiver (resume) */
	uint64_t bytes_sent;	/* chunk bytes written to sockets, copies and resends included */
	uint64_t bytes_acked;	/* chunk bytes the receiver verified in this run */
	uint64_t bytes_dup;	/* bytes_sent beyond bytes_acked: copies and resends, wasted */
	uint32_t files, chunks, chunks_resent, chunks_dup, chunks_bad;
	int listing;		  /* files are still being listed: files, chunks and bytes_total
				     are what was listed so far, not the transfer's totals */
	double listing_seconds;	  /* from the start until the last file was listed (so far) */
	uint32_t parts;		  /* parts the manifest went in (1: whole, as before protocol 3) */
	uint64_t zc_bytes;	  /* sent without a user-space copy (sendfile, MSG_ZEROCOPY) */
	uint64_t zc_copied_bytes; /* of those, MSG_ZEROCOPY bytes the kernel copied anyway */
	double seconds;
	unsigned nlinks;
	struct xfer_link_report links[XFER_LINKS_MAX];
	char error[256];
};

struct xfer_send_opts {
	const char *remote;	/* "HOST:PORT[,HOST:PORT...]": one link per address */
	const char *local;	/* NULL, or "ADDR[,ADDR...]": the source of each link */
	unsigned streams;	/* per link; 0: XFER_SEND_STREAMS */
	unsigned chunk_kib;	/* 0: XFER_SEND_CHUNK_KIB */
	unsigned stall_ms;	/* no progress for this long = stream lost; 0: XFER_SEND_STALL_MS */
	const char *token_file; /* NULL: no token */
	const char *const *bcast; /* further receivers after <remote>, in chain order */
	unsigned nbcast;
	unsigned progress_ms; /* 0: 250 */
	int tls;	      /* encrypt this transfer (the server needs --tls-cert) */
	const char *tls_ca;   /* verify the server against this CA (default: the system's) */
	const char *tls_cert, *tls_key; /* a client certificate, for servers that require one */
	int tls_insecure;		/* encrypt without verifying the server (testing only) */
	int numa_off; /* leave stream threads unpinned (else on their NIC's NUMA node's CPUs) */
	/* the receiver's answer to a manifest part, once its first byte came, must come whole
	 * within frame_ms and a second more per min_rate_kib KiB of it (0: XFER_SERVE_FRAME_MS,
	 * XFER_SERVE_MIN_RATE_KIB; a relay passes its serve's --frame-ms, --min-rate-kib) */
	unsigned frame_ms, min_rate_kib;
	void (*progress)(const struct xfer_report *r, void *arg);
	void *arg;
};

/* Send <items> (files, directories expanded by xfer_items_from_paths, or buffers). Returns 0
 * when every item is verified in place on the receiver (and every bcast hop); else -errno
 * with rep->error saying why. <rep> is filled in either case. */
int xfer_send(const struct xfer_send_opts *o, const struct xfer_item *items, unsigned n,
	      struct xfer_report *rep);

/*
 * A streamed send: the manifest goes out in parts while the caller is still listing, and the
 * chunks of the files listed flow meanwhile (a tree of 100,000 files starts moving data after
 * its first files, not after its walk). begin: nothing is sent yet. add: one item (its name and
 * path copied; a buffer must stay untouched until end returns); 0, or -errno once the transfer
 * has failed (call end for the report). end: the last part, then as xfer_send (0 when every
 * item is verified in place); frees <x>. A bcast chain (o->nbcast) gets its manifest whole at
 * end. While files are listed, progress reports say so (r->listing): the totals are not known.
 */
struct xfer_sending;
int xfer_send_begin(const struct xfer_send_opts *o, struct xfer_sending **x);
int xfer_send_add(struct xfer_sending *x, const struct xfer_item *it, struct xfer_report *rep);
int xfer_send_end(struct xfer_sending *x, struct xfer_report *rep);

/* Send the files and trees at <paths> (named as xfer_items_from_paths names them) while they
 * are walked (a streamed send, above). 0, or -errno with rep->error set (a path that cannot be
 * read: its name and why). */
int xfer_send_paths(const struct xfer_send_opts *o, const char *const *paths, unsigned n,
		    const char *to, struct xfer_report *rep);

/* Expand paths (files and directory trees) into items named as on the receiver: a path's
 * last component, or <to> in its place when one path is given, or <to>/... for several.
 * *items is malloc'd (free with xfer_items_free). 0, or -errno with the path in <bad>. */
int xfer_items_from_paths(const char *const *paths, unsigned n, const char *to,
			  struct xfer_item **items, unsigned *nitems, char *bad, size_t badlen);
void xfer_items_free(struct xfer_item *items, unsigned n);

/* Pull <names> (files or trees under the server's directory) into the directory <dest>, over
 * o->remote's links (o->local, streams, token, stall_ms apply; bcast does not). Same
 * guarantees as xfer_send: chunks and files verified, resumable, nothing half-written. The
 * server is trusted only as far as the names: it may send a requested name's last component
 * and what lies beneath it, nothing else, no bcast hop, at most XFER_SERVE_MAX_FILES files,
 * created beneath <dest> with modes masked by 0777 and the umask. With a token the server
 * must prove it holds it too; without TLS nothing else authenticates it. */
int xfer_get(const struct xfer_send_opts *o, const char *const *names, unsigned n, const char *dest,
	     struct xfer_report *rep);

/* Defaults of the limits below (an option left 0 takes its default). */
#define XFER_SERVE_MAX_CONNS 1024	  /* connections at once */
#define XFER_SERVE_MAX_CONNS_PER_ADDR 128 /* connections at once from one address */
#define XFER_SERVE_MAX_FILES 10000	  /* files in one transfer (also what `get` accepts) */
#define XFER_SERVE_HANDSHAKE_MS 10000	  /* from accept to the end of the handshake, in all */
#define XFER_SERVE_FRAME_MS 60000	  /* a frame, from its first byte to its last, in all ... */
#define XFER_SERVE_MIN_RATE_KIB 32	  /* ... and a second more for each this many KiB of it */
#define XFER_SERVE_KEEP_PARTS_HOURS 72	  /* an untouched partial file is removed after this */

struct xfer_serve_opts {
	const char *listen;	/* "ADDR[,ADDR...]": one listener per link */
	const char *dir;	/* files land beneath it */
	const char *token_file; /* clients (and this server) prove they hold this secret */
	int insecure;	     /* with neither token_file nor tls_ca: serve anyway (else refused) */
	const char *metrics; /* NULL, or ADDR for GET /metrics (Prometheus text) */
	const char *tls_cert, *tls_key; /* accept TLS transfers with this certificate */
	const char *tls_ca;		/* require TLS with client certificates signed by this CA */
	const char *relay_to;	   /* "CIDR[,CIDR...]": where bcast hops may be; NULL: nowhere */
	unsigned keep_parts_hours; /* partial files untouched this long are removed; 0:
				      XFER_SERVE_KEEP_PARTS_HOURS */
	unsigned max_conns, max_conns_per_addr, max_files, handshake_ms; /* 0: the defaults above */
	unsigned frame_ms, min_rate_kib; /* a frame's deadline (0: the defaults above) */
	int numa_off;			 /* connection threads not pinned to their NIC's node */
	volatile int *stop;		 /* set non-zero (e.g. from a signal handler) to return */
	void (*ready)(const int *ports, unsigned n, void *arg); /* after binding (port 0 works) */
	void *arg;
};

/* Receive until *stop. 0, or -errno when a listener cannot start (message on stderr);
 * -EPERM when neither a token nor a client CA is given and <insecure> is not set. */
int xfer_serve(const struct xfer_serve_opts *o);

#endif
