/*
 * adminc.h - a small client of the admin endpoint, for `accelnet top` and `accelnet ctl`
 * (found by flag, else by the environment, else at the demo's address):
 * one request per short HTTP/1.1 connection (Connection: close), with the bearer token when
 * one is given, the answer read whole (capped) and handed back with its status.
 *
 * The endpoint is another process, so nothing it says is trusted: the answer is capped at
 * ADMINC_BODY_MAX, reading and writing time out after ADMINC_IO_TIMEOUT_MS, and an error
 * message never holds a byte outside printable ASCII. The token is read from a file, never
 * from the command line, and wiped once the client is done (adminc_wipe).
 */
#ifndef ACCELNET_CLI_ADMINC_H
#define ACCELNET_CLI_ADMINC_H

#include <stddef.h>

#define ADMINC_TOKEN_MAX 256
#define ADMINC_BODY_MAX (16u << 20) /* an answer larger than this is refused */
#define ADMINC_IO_TIMEOUT_MS 3000

struct adminc {
	char host[128];
	char port[16];
	char token[ADMINC_TOKEN_MAX + 1]; /* "" when none */
	char err[640];			  /* what the last failed call says */
};

#define ADMINC_DEFAULT_ADDR "127.0.0.1:8399" /* accelnet demo's admin endpoint */

/* What no flag gave, as `top`, `ctl` and `reload` read it: *admin from $ACCELNET_ADMIN, else
 * ADMINC_DEFAULT_ADDR; *token_file from $ACCELNET_ADMIN_TOKEN_FILE, else NULL (none). */
void adminc_from_env(const char **admin, const char **token_file);
/* "HOST:PORT" or "[V6]:PORT" into a->host and a->port; -EINVAL when malformed. */
int adminc_parse_addr(struct adminc *a, const char *addr);
/* The token of <path>: one line of printable characters without spaces. 0, or -1 with
 * a->err filled (never the token). */
int adminc_load_token(struct adminc *a, const char *path);
/*
 * <method> <target> with <body>[0..blen) (NULL: none; sent as application/json). 0 with the
 * answer's status in *status and its body in *out (malloc'd, NUL-terminated, *outlen bytes;
 * the caller frees it), or -1 with a->err filled: unreachable, no or a malformed answer, too
 * large. A 401 is an answer (0).
 */
int adminc_call(struct adminc *a, const char *method, const char *target, const char *body,
		size_t blen, int *status, char **out, size_t *outlen);
/* Wipe the token. */
void adminc_wipe(struct adminc *a);

#endif
