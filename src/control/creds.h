/*
 * creds.h - the key material workers read: each TLS listener's contexts and each route's
 * authentication tables (API keys, JWT keys, Basic users: guard/auth.h). Built before
 * anything serves; built again on SIGHUP (or, for listeners with reload_s, when one of
 * their files changed), from the same files, and swapped in whole, so a renewed certificate
 * or a changed keys, JWKS or users file takes effect without a restart and without dropping
 * a connection. A Basic table's remembered passwords start afresh.
 *
 * A reload is all or nothing: if any file fails to load, everything stays as it was and the
 * log says which file and why. Workers read each table with one acquire load per use:
 *   - a TLS connection holds its contexts (OpenSSL counts the references) for its life, and
 *     a handshake under way may still call back into the listener it began on, so replaced
 *     listeners are kept until the process ends (a few tens of KiB per reload);
 *   - an auth table is only read inside one stage call (the identity is copied out), so a
 *     replaced table is freed once every worker has finished a loop turn since the swap.
 * Main thread only, except for the workers' loads.
 */
#ifndef ACCELNET_CONTROL_CREDS_H
#define ACCELNET_CONTROL_CREDS_H

#include "proxy/worker.h"

#include <stddef.h>

/* Build sh->tls and sh->auth from sh->conf. 0, or -errno with the file and reason in <err>. */
int creds_build(struct worker_shared *sh, char *err, size_t errlen);
/* Free them, and every replaced table kept since (the workers have stopped). */
void creds_free(struct worker_shared *sh);
/* SIGHUP, or a watched file changed: read the files again and swap (see above). Logs what
 * happened, <why> first. */
void creds_reload(struct worker_shared *sh, struct worker *workers, unsigned nworkers,
		  const char *why);
/* listen[].tls.reload_s: every so often (the shortest reload_s), look at the watched
 * listeners' files (identity, size, times); when one changed, creds_reload() on the main
 * loop. 0, or -ENOMEM. Stopped by creds_free(). */
int creds_watch(struct worker_shared *sh, struct worker *workers, unsigned nworkers);
/* Load everything once and free it: `accelnet check`. 0 or -errno with <err>. */
int creds_check(const struct conf *conf, char *err, size_t errlen);

#endif
