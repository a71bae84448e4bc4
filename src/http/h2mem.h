/*
 * h2mem.h - nghttp2's allocator over a thread's small-block free lists (core/smallmem.h).
 *
 * nghttp2 allocates a stream, its header list and each frame it queues, and frees them soon
 * after: a session given this allocator takes them from its owner thread's free lists, so a
 * request takes no trip through malloc. The session must live and die on that thread.
 */
#ifndef ACCELNET_HTTP_H2MEM_H
#define ACCELNET_HTTP_H2MEM_H

#include "core/smallmem.h"

#include <nghttp2/nghttp2.h>

/* Fill <mem> (to pass to nghttp2_session_*_new3(), which copies it) to allocate from <m>. */
void h2mem_init(nghttp2_mem *mem, struct smallmem *m);

#endif
