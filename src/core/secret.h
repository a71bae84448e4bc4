/*
 * secret.h - reading a shared secret (a token) from a file, for the admin endpoint and for
 * xfer. One place decides what a token file may hold, and the scratch copy is wiped.
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

#endif
