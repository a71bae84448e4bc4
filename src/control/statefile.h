/*
 * statefile.h - admin.state_file: what the admin API changed, kept across restarts.
 *
 * The file is one JSON document, rewritten whole after every change:
 *
 *   {"version": 1, "maintenance": 0,
 *    "pools": {"gpu": [{"address": "10.0.0.9:8000", "source": "api", "weight": 2,
 *                       "max_concurrency": 4, "state": "enabled"},
 *                      {"address": "10.0.0.1:8000", "source": "config", "state": "draining"}]}}
 *
 * An added backend is kept whole; of a config backend only what the API changed (weight,
 * max_concurrency, a state other than enabled, "removed": true), so the config's word holds
 * for the rest; backends DNS discovery finds are never in it. It is written to PATH.tmp,
 * fsync'd and renamed over PATH (then the directory fsync'd): a crash or a full disk leaves
 * the old file whole. PATH.tmp is created afresh, never through a symbolic link. The same document,
 * built in memory, carries the changes into the runtime a reload builds (statefile_carry), so a
 * reload keeps them with or without a file.
 */
#ifndef ACCELNET_CONTROL_STATEFILE_H
#define ACCELNET_CONTROL_STATEFILE_H

#include "runtime/pool.h"

#include <stddef.h>

#define STATEFILE_MAX_BYTES (4u << 20) /* a larger state file is refused as corrupt */

/*
 * Write <rt>'s changes to <path> atomically. 0, or -errno with <err> saying what failed (the
 * old file is then untouched).
 */
int statefile_save(const struct runtime *rt, const char *path, char *err, size_t errlen);

/*
 * Apply the state file <path> over <rt> (after it is built, before or while it serves; on
 * the main thread): added backends are added again, weights, caps, states and removals
 * re-applied, maintenance set. An entry naming a pool or a config backend that no longer
 * exists, or that cannot be applied (no free slot), is skipped with a warning. 0 (also when
 * there is no file), or -EINVAL with <err> when the file is not a state file (unreadable,
 * not JSON, wrong shape) or is not to be believed (a symbolic link, not owned by root or the
 * service user, writable by group or others): then nothing of it was applied. <err> never
 * quotes the file's content.
 */
int statefile_apply(struct runtime *rt, const char *path, char *err, size_t errlen);

/*
 * At start: statefile_apply(), and a file that is not a state file renamed PATH.bad (so that
 * the next change does not write over what it held), with a warning: the proxy starts from
 * its config alone.
 */
void statefile_start(struct runtime *rt, const char *path);

/*
 * A reload built <to> beside the running <from> (both on the main thread, <to> not yet
 * serving): what the admin API changed in <from> is made in <to> too, as if <from>'s state
 * file were applied (its added backends in <to>'s spare slots, its overrides, maintenance).
 * Call it before carry_runtime(), so that the added backends are carried too. 0 or -ENOMEM.
 */
int statefile_carry(struct runtime *to, const struct runtime *from);

#endif
