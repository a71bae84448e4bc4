/*
 * conn.h - one xfer connection: blocking frame I/O with a stall timeout, dialing from a chosen
 * source address, and the token handshake.
 *
 * xfer runs each TCP stream on its own thread with a blocking socket: a stream does one thing
 * at a time (send a chunk, read an acknowledgement), the kernel does the waiting, and a stall
 * shows up as a send or receive timeout (SO_SNDTIMEO/SO_RCVTIMEO) rather than as a timer in
 * an event loop. Every function returns 0 (or a count) or -errno; -ETIMEDOUT means no
 * progress within the stall timeout, -ECONNRESET that the peer closed.
 *
 * Handshake: the server sends CHALLENGE(nonce); the client answers HELLO(version, role,
 * session id, HMAC-SHA256(token, nonce | role | session)); the server answers ERR(text), or
 * OK with its own proof, HMAC-SHA256(token, "accelnet-xfer server" | nonce | role | session),
 * which a client holding a token requires: both ends show they hold the token, and the token
 * itself never travels. Without a token on the server any HELLO is accepted (serve --insecure)
 * and its OK is empty, which a client with a token refuses. Without TLS this authenticates the
 * two ends at the handshake only: someone on the path can still read or change what follows.
 */
#ifndef ACCELNET_XFER_CONN_H
#define ACCELNET_XFER_CONN_H

#include "net/addr.h"
#include "net/conn.h"
#include "xfer/wire.h"

#include <stddef.h>
#include <stdint.h>

/* A shared secret as read from a token file (trailing newline dropped). */
struct xfer_token {
	uint8_t key[256];
	size_t len; /* 0: no token */
};

/* Read a token file: 0, or -errno / -EINVAL (empty, over 256 bytes) with *why. */
int xfer_token_load(const char *path, struct xfer_token *t, const char **why);

/* Send a frame without data: header and meta in one write. */
int xfer_frame_send(struct net_conn *c, uint8_t type, const void *meta, uint32_t meta_len);
/* Wait until the next frame's first byte has come (on the socket, or in TLS's buffer), at
 * most the socket's receive timeout: 0, -ETIMEDOUT, or -errno. A frame's deadline starts
 * there (server.h), not while the peer has nothing to say. */
int xfer_frame_wait(struct net_conn *c);
/* A frame's header alone: 0, or -errno (-EPROTO: not a header). */
int xfer_frame_recv_head(struct net_conn *c, struct xfer_hdr *h);
/* Its meta (h->meta_len bytes), into <small> when it fits (shorter than <cap>), else a buffer
 * malloc'd to its size (the caller frees *meta when it is not <small>). 0 or -errno. */
int xfer_frame_recv_meta(struct net_conn *c, const struct xfer_hdr *h, uint8_t *small, uint32_t cap,
			 uint8_t **meta);
/* Read a header and its meta into <meta> (at most <max> bytes, else -EPROTO). Data, if any,
 * is left on the socket for the caller. */
int xfer_frame_recv(struct net_conn *c, struct xfer_hdr *h, uint8_t *meta, uint32_t max);
/* The same, with the meta in a buffer malloc'd to its size (caller frees *meta). */
int xfer_frame_recv_alloc(struct net_conn *c, struct xfer_hdr *h, uint8_t **meta);
/*
 * xfer_frame_recv_alloc() for a frame a peer may trickle: once its first byte has come (the
 * wait for it is the socket's timeout, as before), the whole frame within <frame_ms> of it and
 * a second more for each <min_rate> bytes of meta its header declares. -ETIMEDOUT past either; the
 * socket's timeouts are left at the time that was left (the caller sets its own after).
 */
int xfer_frame_recv_timed(struct net_conn *c, struct xfer_hdr *h, uint8_t **meta, unsigned frame_ms,
			  uint64_t min_rate);
/* The same, with the meta in <small> when it fits (shorter than <cap>): no allocation per
 * chunk. The caller frees *meta only when it is not <small>. */
int xfer_frame_recv_into(struct net_conn *c, struct xfer_hdr *h, uint8_t *small, uint32_t cap,
			 uint8_t **meta);
/* Read and drop <len> bytes (the data of a frame that is refused). */
int xfer_discard(struct net_conn *c, uint64_t len);

/* One link as the user named it: where to connect, and from which source address. */
#define XFER_ADDR_LIST_MAX 2047 /* "HOST:PORT,..." lists: longer ones are refused, not cut */

struct xfer_path {
	struct net_addr remote, local;
	int has_local;
	char rname[64], lname[64];
};

/*
 * Parse "HOST:PORT[,HOST:PORT...]" and the optional "ADDR[,ADDR...]" of source addresses
 * (same order, at most as many) into <out> (at most <max>). Returns the number of links, or
 * -EINVAL with a message in <err>.
 */
int xfer_paths_parse(const char *remote, const char *local, struct xfer_path *out, int max,
		     char *err, size_t errlen);

/* Set the stall timeout of a connected socket. */
void xfer_set_timeout(int fd, int timeout_ms);

/*
 * TLS, per transfer. A client that wants it starts TLS right after connecting; one that does
 * not sends the 4-byte magic instead, so a server tells them apart from the first byte
 * (net_tls_sniff) and one listener serves both. The token handshake below then runs inside
 * TLS. Contexts come from net/tls.h: a client verifies the server's certificate unless told
 * --tls-insecure; a server with a CA requires a client certificate (mutual TLS) and refuses
 * plain connections.
 */
struct ssl_ctx_st;
/* After accepting: the client's choice, TLS needing <ctx>. -EACCES: refused (why in *why). */
int xfer_conn_start_server(struct net_conn *c, struct ssl_ctx_st *ctx, int tls_required,
			   const char **why);

/* Server side: 0 with the client's HELLO, -EACCES (bad token; ERR sent), or -errno. */
int xfer_handshake_server(struct net_conn *c, const struct xfer_token *t, struct xfer_hello *out);

/*
 * The one way a client side opens a connection (a sender's stream, a `get` connection, a
 * bcast relay's stream): dial <p> from its source address within <connect_ms> (a readable
 * <cancel_fd> ends the wait early; -1: none), set the stall timeout <stall_ms>, start TLS
 * with <tls> (checking p->rname's host) or send the plain magic, then the token handshake as
 * <role> of transfer <session>. 0 with <c> open; or -errno with <c> closed, why in <err>,
 * and *reached telling whether the TCP connect itself succeeded. -EACCES: the server (or its
 * certificate) refused us, which trying again will not change.
 */
struct xfer_dial {
	struct ssl_ctx_st *tls; /* NULL: plain */
	const struct xfer_token *token;
	uint8_t role;
	const uint8_t *session; /* XFER_SESSION_LEN bytes */
	int connect_ms, stall_ms, cancel_fd;
};
int xfer_conn_open(const struct xfer_path *p, const struct xfer_dial *d, struct net_conn *c,
		   int *reached, char *err, size_t errlen);

#endif
