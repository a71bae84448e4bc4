/*
 * wire.h - the xfer wire format: every message is a 16-byte frame header, a small "meta" part
 * the receiver parses, and an optional raw data part (a chunk's bytes) it never parses.
 *
 *   offset 0  u32 magic "AXF1"      offset 8  u32 meta_len (<= XFER_META_MAX)
 *          4  u8 type, u8 flags,           12 u32 data_len (<= XFER_DATA_MAX)
 *             u16 reserved (0)
 *
 * All integers are little-endian. A client first sends the 4-byte magic (or starts TLS, see
 * conn.h); then the server's CHALLENGE (a random nonce), the client's HELLO (role, transfer
 * id, HMAC-SHA256 of the nonce under the shared token) and the server's OK, which carries the
 * server's own proof of the token when it has one (see conn.h). Every connection of a
 * transfer is alike: the first carries MANIFEST -> NEED, one part of the manifest after the
 * other (the sender lists a tree as it sends it), each carries CHUNK -> ACK (or, for
 * files of one chunk of at most XFER_BATCH_FILE_MAX bytes, BATCH -> BATCH_ACK: up to
 * XFER_BATCH_FILES whole files in one message), and any live one FINISH -> DONE at the end. The
 * parsers here take bytes off the network and are fuzzed (tests/fuzz/fuzz_xfer_wire.c): they check
 * every length before reading.
 */
#ifndef ACCELNET_XFER_WIRE_H
#define ACCELNET_XFER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define XFER_MAGIC 0x31465841u /* "AXF1" read as little-endian */
#define XFER_HDR_LEN 16
#define XFER_META_MAX (64u << 20)
#define XFER_DATA_MAX (64u << 20)
#define XFER_VERSION                                                                               \
	3 /* 2: BATCH and BATCH_ACK; 3: the manifest in parts; older peers are refused */
#define XFER_NONCE_LEN 32
#define XFER_SESSION_LEN 16
#define XFER_MAC_LEN 32
#define XFER_PATH_MAX 4096
#define XFER_FWD_MAX 16
#define XFER_CHUNKS_MAX (1u << 31)	/* chunks in one transfer: 32-bit chunk ids never wrap */
#define XFER_STATE_DIR ".accelnet-xfer" /* the receiver's partial files, under its DIR */

enum xfer_type {
	XFER_CHALLENGE = 1, /* server: nonce[32] */
	XFER_HELLO,	    /* client: version, role, session id, mac */
	XFER_OK,	    /* server: empty, or proof[32] when it holds a token */
	XFER_ERR,	    /* either side: text, then the connection closes */
	XFER_MANIFEST,	    /* sender: the files, chunk size, downstream hops */
	XFER_NEED,	    /* receiver: per file, a bitmap of the chunks it still needs */
	XFER_CHUNK,	    /* sender: file, chunk, hash; data = the chunk's bytes */
	XFER_ACK,	    /* receiver: file, chunk, status */
	XFER_FINISH,	    /* sender: every chunk acknowledged; per file its whole hash */
	XFER_DONE,	    /* receiver: files verified and in place */
	XFER_GET,	    /* puller: the names it wants (then the server sends as above) */
	XFER_BATCH,	    /* sender: several small files whole; data = their bytes in order */
	XFER_BATCH_ACK,	    /* receiver: per file of a BATCH, its status */
	XFER_REGION,	    /* loopback stand-in (transport.h): sender asks, receiver advertises */
	XFER_WRITTEN,	    /* loopback stand-in: a chunk written into the receiver's region */
	XFER_TYPE_MAX,
};

/* DATA: the client sends; PULL: the client asks with GET and the server sends on the
 * client's connections (`accelnet xfer get`), the roles of every later frame reversed. */
enum xfer_role { XFER_ROLE_DATA = 2, XFER_ROLE_PULL = 3 };

enum xfer_ack_status {
	XFER_ACK_OK = 0,  /* verified and written */
	XFER_ACK_DUP = 1, /* already had it (a duplicate from the end game or a resend) */
	XFER_ACK_BAD = 2, /* hash mismatch: send it again */
	XFER_ACK_IO = 3,  /* could not write it (disk full...): the transfer fails */
};

struct xfer_hdr {
	uint8_t type;
	uint8_t flags;
	uint32_t meta_len;
	uint32_t data_len;
};

struct xfer_hello {
	uint32_t version;
	uint8_t role;
	uint8_t session[XFER_SESSION_LEN];
	uint8_t mac[XFER_MAC_LEN];
};

struct xfer_chunk_meta {
	uint32_t file;
	uint32_t chunk;
	uint64_t hash;
};

struct xfer_ack {
	uint32_t file;
	uint32_t chunk;
	uint8_t status;
};

/*
 * BATCH: u32 count, then per file u32 file (its index in the manifest, strictly increasing
 * within a batch), u32 len, u64 hash (XXH3-64 of its bytes, as a CHUNK's); the data part is
 * the files' bytes one after the other. A batched file is one chunk: len is its whole size,
 * 1 to XFER_BATCH_FILE_MAX bytes, and the lengths add up to the frame's data_len, at most
 * XFER_BATCH_BYTES. BATCH_ACK: u32 count, then per file u32 file, u8 status (enum
 * xfer_ack_status), in the batch's order.
 */
#define XFER_BATCH_FILES 256
#define XFER_BATCH_FILE_MAX (64u * 1024)
#define XFER_BATCH_BYTES (1u << 20)
#define XFER_BATCH_ENTRY 16
#define XFER_BATCH_META_MAX (4 + XFER_BATCH_FILES * XFER_BATCH_ENTRY)
#define XFER_BATCH_ACK_MAX (4 + XFER_BATCH_FILES * 5)

struct xfer_batch_file {
	uint32_t file, len;
	uint64_t hash;
};

struct xfer_batch {
	uint32_t count;
	struct xfer_batch_file f[XFER_BATCH_FILES];
	uint8_t status[XFER_BATCH_FILES]; /* BATCH_ACK's */
};

/* One file of a manifest. */
struct xfer_file {
	char *path; /* relative, '/'-separated, checked by xfer_path_check() */
	uint64_t size;
	uint32_t mode;
	uint64_t mtime_ns; /* with path, size and mode: the file's identity for resume */
	uint32_t nchunks;  /* follows from size and the manifest's chunk size */
};

/* A manifest, or one part of it (see xfer_manifest_encode). */
struct xfer_manifest {
	uint32_t chunk_size;
	uint32_t nfiles;
	struct xfer_file *files;
	uint32_t nfwd;		 /* bcast: the hops after the receiver, in order */
	char *fwd[XFER_FWD_MAX]; /* each "HOST:PORT[,HOST:PORT...]" */
	uint8_t last;		 /* the last part: the totals below are the whole manifest's */
	uint32_t total_files;
	uint64_t total_bytes;
};

static inline void wire_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
	p[3] = (uint8_t)(v >> 24);
}
static inline void wire_put64(uint8_t *p, uint64_t v)
{
	wire_put32(p, (uint32_t)v), wire_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t wire_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t wire_get64(const uint8_t *p)
{
	return (uint64_t)wire_get32(p) | (uint64_t)wire_get32(p + 4) << 32;
}

void xfer_hdr_encode(uint8_t out[XFER_HDR_LEN], uint8_t type, uint32_t meta_len, uint32_t data_len);
/* Decode and check a header: 0, or -EPROTO (bad magic, unknown type, lengths over the limits). */
int xfer_hdr_decode(const uint8_t in[XFER_HDR_LEN], struct xfer_hdr *out);

/* Fixed-size metas: encode returns the length written; decode 0 or -EPROTO. */
size_t xfer_hello_encode(uint8_t *out, const struct xfer_hello *h);
int xfer_hello_decode(const uint8_t *in, size_t len, struct xfer_hello *out);
#define XFER_HELLO_LEN (4 + 1 + XFER_SESSION_LEN + XFER_MAC_LEN)
size_t xfer_chunk_encode(uint8_t *out, const struct xfer_chunk_meta *c);
int xfer_chunk_decode(const uint8_t *in, size_t len, struct xfer_chunk_meta *out);
#define XFER_CHUNK_LEN 16
size_t xfer_ack_encode(uint8_t *out, const struct xfer_ack *a);
int xfer_ack_decode(const uint8_t *in, size_t len, struct xfer_ack *out);
#define XFER_ACK_LEN 9
/* BATCH's meta (<data_len> from its header): encode returns the length written (at most
 * XFER_BATCH_META_MAX); decode 0, or -EPROTO with the reason in *why (a count of 0 or over
 * XFER_BATCH_FILES, a length that does not fit, files out of order or twice, a file's length
 * of 0 or over XFER_BATCH_FILE_MAX, lengths that do not add up to <data_len>). */
size_t xfer_batch_encode(uint8_t *out, const struct xfer_batch *b);
int xfer_batch_decode(const uint8_t *in, size_t len, uint32_t data_len, struct xfer_batch *out,
		      const char **why);
/* BATCH_ACK against the batch <b> it answers: the same files in the same order; decode fills
 * b->status, 0 or -EPROTO. */
size_t xfer_batch_ack_encode(uint8_t *out, const struct xfer_batch *b);
int xfer_batch_ack_decode(const uint8_t *in, size_t len, struct xfer_batch *b);
/*
 * The loopback stand-in's frames (transport.h; a test transport, off unless both ends are told).
 * REGION from the sender: u64 bytes wanted. REGION from the receiver: u64 key, u64 len, u32 pid,
 * u32 fd: the region it registered (a sealed memfd named after the key, held open as <fd> by
 * process <pid>). WRITTEN: a CHUNK's meta, then u64 offset: the chunk's bytes lie in the region
 * at that offset (no data part). decode 0, or -EPROTO.
 */
struct xfer_region {
	uint64_t key, len;
	uint32_t pid, fd;
};
#define XFER_REGION_ASK_LEN 8
#define XFER_REGION_LEN 24
#define XFER_WRITTEN_LEN (XFER_CHUNK_LEN + 8)
size_t xfer_region_encode(uint8_t *out, const struct xfer_region *r);
int xfer_region_decode(const uint8_t *in, size_t len, struct xfer_region *out);
size_t xfer_written_encode(uint8_t *out, const struct xfer_chunk_meta *c, uint64_t off);
int xfer_written_decode(const uint8_t *in, size_t len, struct xfer_chunk_meta *c, uint64_t *off);
/* OK: empty (*has = 0), or the server's proof of the token (*has = 1); else -EPROTO. */
int xfer_ok_decode(const uint8_t *in, size_t len, uint8_t proof[XFER_MAC_LEN], int *has);

/*
 * A manifest part's encoding: u32 chunk_size, u32 nfiles, u32 nfwd, nfwd × (u16 len, bytes), then
 * per file u16 path_len, path, u64 size, u32 mode, u64 mtime_ns, then u8 last (0: more parts
 * follow; 1: this is the last) and, in the last part only, u32 total_files and u64 total_bytes:
 * the whole manifest's, which the receiver checks against the parts it took. A sender lists a
 * tree as it sends it: the files of a part are numbered after those of the parts before it, and
 * every part is answered by a NEED of its own files. Chunk hashes are not in it:
 * each CHUNK carries its own, and FINISH carries each file's whole hash (XXH3-128 over the
 * file's chunk hashes in order), so sending starts without reading the files twice. encode
 * mallocs *out (caller frees). decode builds a manifest that owns its memory (free with
 * xfer_manifest_free); it refuses unsafe paths, chunk sizes outside [4 KiB, 64 MiB], more
 * than XFER_CHUNKS_MAX chunks in the part, and more than <max_files> files (-E2BIG, as soon as
 * the count is read, before anything is allocated for them; else -EPROTO); what parts may say
 * together (chunk sizes alike, names not twice, totals) is the receiver's to check.
 */
int xfer_manifest_encode(const struct xfer_manifest *m, uint8_t **out, size_t *len);
int xfer_manifest_decode(const uint8_t *in, size_t len, uint32_t max_files,
			 struct xfer_manifest *out, const char **why);
void xfer_manifest_free(struct xfer_manifest *m);
static inline uint32_t xfer_chunks_of(uint64_t size, uint32_t chunk_size)
{
	return size == 0 ? 0 : (uint32_t)((size + chunk_size - 1) / chunk_size);
}

/* GET: u32 count, then count × (u16 len, bytes): paths under the server's directory, each
 * checked by xfer_path_check. decode mallocs *names (an array of strings, one block). */
int xfer_names_encode(const char *const *names, unsigned n, uint8_t **out, size_t *len);
int xfer_names_decode(const uint8_t *in, size_t len, char ***names, unsigned *n, const char **why);

/* GET: u32 connections the client opens, then the names as above. decode mallocs *names. */
int xfer_get_encode(uint32_t nconns, const char *const *names, unsigned n, uint8_t **out,
		    size_t *len);
int xfer_get_decode(const uint8_t *in, size_t len, uint32_t *nconns, char ***names, unsigned *n,
		    const char **why);

/* NEED: per file, ceil(nchunks/8) bytes, bit i of byte i/8 set = chunk i needed. <needed>
 * holds one byte per chunk of the manifest, files in order (non-zero: needed). encode
 * mallocs *out (caller frees); decode -EPROTO when the length does not fit <m>. */
size_t xfer_need_len(const struct xfer_manifest *m);
int xfer_need_encode(const struct xfer_manifest *m, const uint8_t *needed, uint8_t **out,
		     size_t *len);
int xfer_need_decode(const uint8_t *in, size_t len, const struct xfer_manifest *m, uint8_t *needed);

/* FINISH: per file of the manifest, its whole hash (XFER_WHOLE_HASH_LEN bytes, see store.h),
 * in order. decode checks the length against <nfiles>: *hashes points at file 0's. */
#define XFER_WHOLE_HASH_LEN 16
int xfer_finish_decode(const uint8_t *in, size_t len, uint32_t nfiles, const uint8_t **hashes);

/* The 4-byte preamble of a plain connection: decode 0, or -EPROTO when it is not ours. */
void xfer_magic_encode(uint8_t out[4]);
int xfer_magic_decode(const uint8_t in[4]);
/* CHALLENGE: the server's nonce, exactly XFER_NONCE_LEN bytes; else -EPROTO. */
int xfer_challenge_decode(const uint8_t *in, size_t len, uint8_t nonce[XFER_NONCE_LEN]);
/* OK's meta: the proof (XFER_MAC_LEN bytes), or nothing when <proof> is NULL: its length. */
size_t xfer_ok_encode(uint8_t *out, const uint8_t *proof);
/* ERR: text, not terminated on the wire. decode copies at most <cap> - 1 bytes to <text>,
 * terminated; returns the length copied. Control characters are kept: print with care. */
size_t xfer_err_decode(const uint8_t *in, size_t len, char *text, size_t cap);

/*
 * A relative path a receiver may create under its directory: not empty, not absolute, no
 * empty, "." or ".." component, no backslash or control character, at most XFER_PATH_MAX
 * bytes, not in XFER_STATE_DIR. 0, or -EINVAL with the reason in *why.
 */
int xfer_path_check(const char *path, size_t len, const char **why);

/*
 * `get`: may a server's manifest name <path>? Only when it is what a requested name stands
 * for on the client (its last component) or lies beneath it: asking for "models/m1" admits
 * "m1" and "m1/...", nothing else. 1 when admitted, 0 when not.
 */
int xfer_name_asked(const char *path, const char *const *names, unsigned n);

#endif
