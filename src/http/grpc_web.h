/*
 * grpc_web.h - gRPC-Web's text mode (application/grpc-web-text): its bodies are the base64
 * of gRPC-Web's binary ones, both ways, and the proxy turns them into gRPC and back as they
 * stream (routes.grpc_web, proxy/up_h2.c).
 *
 * The decoder takes a request body in pieces of any size: four characters make a quantum,
 * and a padded quantum ("xx==", "xxx=") may end a piece of the stream anywhere, after which
 * a new base64 run begins (a client may encode each message on its own, as the gRPC-Web
 * protocol allows). It holds at most three characters between calls, writes only where it
 * is given room, and refuses what is not base64 (a character outside the standard alphabet,
 * whitespace included; padding inside a quantum's first two places or followed by data in
 * it; a body that ends inside a quantum) with a sentence for the client.
 *
 * The encoder writes a response body as it comes, its bytes carried over to the next call
 * when they do not fill a quantum; it follows gRPC's message framing (a flag, a 4-byte
 * length, the message) and pads at each message's end, so a client decodes every message
 * as soon as it has come whole, and a stream of small messages is not held back waiting
 * for the next. grpc_web_encode_flush() pads what is left (the body's end).
 * Pure: no sockets, no clocks, no allocation.
 */
#ifndef ACCELNET_HTTP_GRPC_WEB_H
#define ACCELNET_HTTP_GRPC_WEB_H

#include <stddef.h>
#include <stdint.h>

struct grpc_web_dec {
	char q[4];	  /* the quantum being read ... */
	uint8_t n;	  /* ... its characters so far */
	const char *why;  /* the first failure, for the client; NULL while the input is sound */
	uint64_t decoded; /* bytes written in all */
};

/*
 * Decode in[0..len) into out[0..cap): as much of the input as the room takes (a quantum goes
 * whole or waits). The bytes written, with *used the characters taken; or -1 (d->why says
 * what is wrong; it stays failed).
 */
long grpc_web_decode(struct grpc_web_dec *d, const char *in, size_t len, size_t *used, char *out,
		     size_t cap);
/* The body ended: 0 when it ended on a quantum's end, else -1 (d->why). */
int grpc_web_decode_end(struct grpc_web_dec *d);

struct grpc_web_enc {
	unsigned char carry[2]; /* bytes that do not fill a quantum yet ... */
	uint8_t ncarry;		/* ... how many */
	uint8_t hdr;		/* bytes of the current message's 5-byte prefix seen */
	uint32_t left;		/* its payload bytes still to come, once the prefix is whole */
};

/* The most characters grpc_web_encode() writes for <len> bytes (a message may end every five
 * bytes, each end padded; a constant expression for a constant <len>), and
 * grpc_web_encode_flush() at most. */
#define GRPC_WEB_ENCODE_ROOM(len) (4 * (((len) + 2) / 3 + (len) / 5 + 2))
#define GRPC_WEB_FLUSH_ROOM 4

/* Encode in[0..len) into out (room for GRPC_WEB_ENCODE_ROOM(len)): how many characters. */
size_t grpc_web_encode(struct grpc_web_enc *e, const unsigned char *in, size_t len, char *out);
/* The bytes carried, padded (the body's end): 0 or 4 characters into out. */
size_t grpc_web_encode_flush(struct grpc_web_enc *e, char *out);

/* in[0..len) as one padded base64 run into out (room for 4 * ((len + 2) / 3)): its length. */
size_t grpc_web_b64(const unsigned char *in, size_t len, char *out);

#endif
