/*
 * protowire.h - the Protocol Buffers wire format, as far as the proxy speaks it to an engine's
 * gRPC service (engine_pb.h): varints, fixed 32-bit values and length-delimited fields, written
 * into a caller's buffer and read from a peer's bytes one field at a time.
 *
 * The reader trusts nothing: a varint longer than ten bytes, a length past the end, a field
 * number 0 or a wire type it does not know (groups, 3 and 4, are refused: proto3 has none)
 * ends the message as malformed, never reads past it. Fields it is not asked about are
 * skipped, as every protobuf reader does, so an engine that sends more than we know is read.
 * Nothing here allocates.
 */
#ifndef ACCELNET_HTTP_PROTOWIRE_H
#define ACCELNET_HTTP_PROTOWIRE_H

#include <stddef.h>
#include <stdint.h>

enum pw_type {
	PW_VARINT = 0,
	PW_I64 = 1,
	PW_LEN = 2,
	PW_I32 = 5,
};

/* A message being written into p[0..cap): len grows; err is set (and stays) once one field
 * did not fit, so a writer checks once, at the end. */
struct pw_out {
	uint8_t *p;
	size_t len, cap;
	int err;
};

/* The bytes of varint <v>: 1 to 10. */
size_t pw_varint_len(uint64_t v);
void pw_put_varint(struct pw_out *o, uint64_t v);
void pw_put_tag(struct pw_out *o, uint32_t field, enum pw_type t);
void pw_put_uint(struct pw_out *o, uint32_t field, uint64_t v);
void pw_put_float(struct pw_out *o, uint32_t field, float f);
void pw_put_bytes(struct pw_out *o, uint32_t field, const void *p, size_t n);

/* One field as read: its number and type, and its value (v for a varint or a fixed value's
 * bits, p[0..n) for a length-delimited one, inside the message). */
struct pw_field {
	uint32_t num;
	enum pw_type type;
	uint64_t v;
	const uint8_t *p;
	size_t n;
};

struct pw_in {
	const uint8_t *p, *end;
};

static inline void pw_in_init(struct pw_in *in, const void *p, size_t n)
{
	in->p = p;
	in->end = in->p + n;
}

/* The next field of <in> into *f: 1; 0 at the message's end; -1 when the bytes are not a
 * message (the reader stops there). */
int pw_next(struct pw_in *in, struct pw_field *f);

/* A varint from p[*at..n): 0 with *v and *at past it, or -1 (cut short, longer than 10). */
int pw_get_varint(const uint8_t *p, size_t n, size_t *at, uint64_t *v);

#endif
