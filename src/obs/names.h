/*
 * names.h - a bounded table of label values met at run time (tenants), for a label space
 * whose values are not known when the registry is built.
 *
 * The table has room for <max> names, series 0 .. max-1 in the order they were first met;
 * series <max> is the fold ("other"), where every name met once the table is full goes, so
 * the series a registry keeps for the space stay bounded however many names turn up. A
 * name is interned on first sight. The lookup every request makes is lock-free: an
 * open-addressed index whose slots are published with release stores and read with acquire
 * loads; only a name not seen yet takes the table's mutex to be added. Names are never
 * removed, so an index once answered names the same string for the table's life, and once
 * the table is full a miss answers the fold without the lock. A name equal to the fold's
 * own is folded too, so no two series ever carry one label value.
 *
 * names_at() is what a label space's label callback (obs/metrics.h) answers: the name of a
 * series, or NULL while nothing has used it yet, and the writers leave such series out.
 */
#ifndef ACCELNET_OBS_NAMES_H
#define ACCELNET_OBS_NAMES_H

#include <stddef.h>

struct name_table;

/* A table of <max> names (>= 1) of at most <maxlen> bytes, folding into <fold> (the caller's
 * string, outliving the table). 0 or -ENOMEM. */
int names_create(size_t max, size_t maxlen, const char *fold, struct name_table **out);
void names_destroy(struct name_table *t);

/* The series of the name <s>[0..len), interned now if new: < max, or max (the fold) when the
 * table is full, the name empty, longer than maxlen or holding a NUL, or the fold's
 * own name. Any thread. */
size_t names_intern(struct name_table *t, const char *s, size_t len);

/* The name of series <i> (<= max), or NULL while it is unused. Any thread. */
const char *names_at(const struct name_table *t, size_t i);

/* <max>: the fold's series; the space has max + 1. */
size_t names_max(const struct name_table *t);

#endif
