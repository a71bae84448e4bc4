/*
 * send.h - what send.c gives the rest of xfer beside the public xfer_send(): paths expanded
 * beneath a server's directory, and a send over the engine's own options (see send.c).
 */
#ifndef ACCELNET_XFER_SEND_H
#define ACCELNET_XFER_SEND_H

#include "xfer/engine.h"

/*
 * A server answering GET: send <names> (relative to <dirfd>) as xfer_send_paths would (a
 * name's last component, and beneath it for a tree), the manifest in parts while the trees are
 * walked, over the client's connections (<ad>); every step beneath <dirfd>, and no symlink
 * followed: a name that is or goes through one is refused without looking where it leads
 * (outside DIR, or to DIR itself and its partial files), and symlinks inside a tree are
 * skipped. Every name is looked at before the first part: 0, or -errno with rep->error set
 * (naming only what was asked when a name cannot be served).
 */
int xfer_send_beneath(const struct xfer_send_opts *o, const struct xfer_adopt *ad, int dirfd,
		      const char *const *names, unsigned n, struct xfer_report *rep);

/* xfer_send() with the engine's options: adopted connections (<ad>, or NULL to dial), and
 * file paths opened beneath <dirfd> when it is >= 0 (a server answering GET). */
int xfer_send_items(const struct xfer_send_opts *o, const struct xfer_adopt *ad, int dirfd,
		    const struct xfer_item *items, unsigned n, struct xfer_report *rep);

#endif
