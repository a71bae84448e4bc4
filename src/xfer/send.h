/*
 * send.h - what send.c gives the rest of xfer beside the public xfer_send(): paths expanded
 * beneath a server's directory, and a send over the engine's own options (see send.c).
 */
#ifndef ACCELNET_XFER_SEND_H
#define ACCELNET_XFER_SEND_H

#include "xfer/engine.h"

/*
 * A server answering GET: expand <names> (relative to <dirfd>) into items as
 * xfer_items_from_paths would (a name's last component, and beneath it for a tree), but
 * every step beneath <dirfd>, and no symlink followed: a name that is or goes through one is
 * refused without looking where it leads (outside DIR, or to DIR itself and its partial
 * files), and symlinks inside a tree are skipped. Item paths are
 * relative to <dirfd>. 0, or -errno with a message in <err> that names only what was asked.
 */
int xfer_items_beneath(int dirfd, const char *const *names, unsigned n, struct xfer_item **items,
		       unsigned *nitems, char *err, size_t errlen);

/* xfer_send() with the engine's options: adopted connections (<ad>, or NULL to dial), and
 * file paths opened beneath <dirfd> when it is >= 0 (a server answering GET). */
int xfer_send_items(const struct xfer_send_opts *o, const struct xfer_adopt *ad, int dirfd,
		    const struct xfer_item *items, unsigned n, struct xfer_report *rep);

#endif
