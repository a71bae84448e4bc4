/*
 * secret.h - reading secrets from files: a shared secret (a token) for the admin endpoint
 * and for xfer, and whole credential files (API keys, users, JWT keys) for their parsers.
 * One place decides what a token file may hold and how big a credential file may be, and
 * every copy is wiped when done.
 */
#ifndef ACCELNET_CORE_SECRET_H
#define ACCELNET_CORE_SECRET_H

#include <stddef.h>
#include <stdint.h>

/*
 * Read the file at <path> into out[0..cap): its bytes, less a trailing CR/LF. 0 with *len
 * set, or -errno (open/read failed) or -EINVAL (empty, or longer than <cap>) with *why, a
 * static string that never contains the secret. The caller wipes <out> when done.
 */
int secret_load(const char *path, uint8_t *out, size_t cap, size_t *len, const char **why);

/*
 * Read the file at <path> whole, at most <max> bytes: 0 with *buf (malloc'ed, *len bytes,
 * free it with secret_file_free()), or -errno with "PATH: why" in err[0..errlen) (-EFBIG:
 * larger than <max>).
 */
int secret_file_read(const char *path, size_t max, char **buf, size_t *len, char *err,
		     size_t errlen);

/* Wipe and free what secret_file_read() gave. */
void secret_file_free(char *buf, size_t len);

#endif
