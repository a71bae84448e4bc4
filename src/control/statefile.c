/*
 * statefile.c - admin.state_file, written and applied (see statefile.h).
 *
 * The document is built and read with jansson (its parser caps nesting; the file is capped at
 * STATEFILE_MAX_BYTES before it is parsed). Applying checks the whole document's shape first
 * and only then changes anything, through manage.h like the API, so that a file that is not
 * a state file changes nothing, and each change is logged as an API call's is ("state file
 * PATH", or "reload" for statefile_carry, as who).
 *
 * The file can add backends, so it is trusted only as far as its directory is: it is read
 * (as root, before privileges drop) only when it is a regular file, not a symbolic link,
 * owned by root or by the service user (user:, else whoever runs the proxy), and writable
 * by its owner alone, in a directory of such an owner that no one else can change names in
 * (not writable by group or others, or sticky: else another user could put back an old file
 * of the service user's, or link a root-owned one there); anything else is refused whole. What it
 * holds is never echoed into the log when it does not parse (where, not what). Writing never
 * follows a link either: PATH.tmp is created afresh (O_EXCL, O_NOFOLLOW); a stale one, or a link
 * planted there, is unlinked first (the name, never what it points at).
 */
#include "control/statefile.h"
#include "core/log.h"
#include "control/manage.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATEFILE_VERSION 1

static int set_new(json_t *o, const char *key, json_t *v)
{
	return v ? json_object_set_new(o, key, v) : -1;
}

/* The entry of <b>, or NULL when the file need not say anything of it. */
static json_t *entry_of(const struct backend *b, int *fail)
{
	int st = atomic_load(&b->admin);
	unsigned set = b->api_set;
	json_t *e;
	if (b->source == BACKEND_FROM_DNS || backend_slot_free(b))
		return NULL;
	if (b->source == BACKEND_FROM_API) {
		if (!backend_present(b))
			return NULL; /* removed, its last requests finishing */
		set = MANAGE_SET_WEIGHT | MANAGE_SET_CAP | MANAGE_SET_STATE;
	} else if (!set) {
		return NULL;
	}
	if (!(e = json_object()))
		goto fail;
	*fail |= set_new(e, "address", json_string(b->name)) < 0;
	*fail |=
	    set_new(e, "source", json_string(b->source == BACKEND_FROM_API ? "api" : "config")) < 0;
	if (set & MANAGE_SET_WEIGHT)
		*fail |= set_new(e, "weight", json_integer(atomic_load(&b->weight))) < 0;
	if (set & MANAGE_SET_CAP)
		*fail |= set_new(e, "max_concurrency", json_integer(atomic_load(&b->max_conc))) < 0;
	if (set & MANAGE_SET_STATE)
		*fail |= set_new(e, "state",
				 json_string(st == BACKEND_DRAINING   ? "draining"
					     : st == BACKEND_DISABLED ? "disabled"
								      : "enabled")) < 0;
	if (set & MANAGE_SET_REMOVED)
		*fail |= set_new(e, "removed", json_true()) < 0;
	return e;
fail:
	*fail = 1;
	return NULL;
}

static json_t *document_of(const struct runtime *rt)
{
	json_t *doc = json_object(), *pools = json_object();
	int fail = !doc || !pools;
	if (!fail) {
		fail |= set_new(doc, "version", json_integer(STATEFILE_VERSION)) < 0;
		fail |=
		    set_new(doc, "maintenance", json_integer(atomic_load(&rt->maintenance))) < 0;
		fail |= json_object_set(doc, "pools", pools) < 0;
	}
	for (size_t i = 0; !fail && i < rt->npools; i++) {
		const struct pool_rt *p = &rt->pools[i];
		json_t *list = json_array();
		fail |= !list;
		for (size_t j = 0; !fail && j < p->nbackends; j++) {
			json_t *e = entry_of(&p->backends[j], &fail);
			if (e)
				fail |= json_array_append_new(list, e) < 0;
		}
		if (list && json_array_size(list))
			fail |= json_object_set(pools, p->conf->name, list) < 0;
		json_decref(list);
	}
	json_decref(pools);
	if (fail) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* fsync the directory holding <path>, so that the rename is on disk too. */
static int sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = fd < 0 || fsync(fd) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}

/* Create <tmp> afresh for writing: never through a link, never into a file that was there
 * (one left by a crash, or planted, is unlinked and the creation tried once more).
 * A descriptor, or -errno. */
static int open_tmp(const char *tmp)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = open(tmp, flags, 0600);
	if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
		fd = open(tmp, flags, 0600);
	return fd < 0 ? -errno : fd;
}

int statefile_save(const struct runtime *rt, const char *path, char *err, size_t errlen)
{
	char tmp[4096];
	char *text = NULL;
	int fd = -1, rc;
	json_t *doc = document_of(rt);
	if (!doc || !(text = json_dumps(doc, JSON_INDENT(1) | JSON_SORT_KEYS))) {
		rc = -ENOMEM;
		snprintf(err, errlen, "state file %s: out of memory; the old file is kept", path);
		goto fail;
	}
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		rc = -ENAMETOOLONG;
		snprintf(err, errlen, "state file %s: path too long", path);
		goto fail;
	}
	if ((fd = open_tmp(tmp)) < 0) {
		rc = fd;
		goto io_fail;
	}
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto io_fail;
		}
		off += (size_t)n;
	}
	if (write(fd, "\n", 1) != 1 || fsync(fd) < 0) {
		rc = errno ? -errno : -EIO;
		goto io_fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		rc = -errno;
		goto io_fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		rc = -errno;
		goto io_fail;
	}
	if ((rc = sync_dir(path)) < 0)
		log_warn("state file %s: cannot sync its directory: %s", path, strerror(-rc));
	rc = 0;
	goto out;
io_fail:
	snprintf(err, errlen, "cannot write the state file %s: %s; the old file is kept", path,
		 strerror(-rc));
	if (fd >= 0)
		close(fd);
	unlink(tmp);
fail:
	log_error("%s", err);
out:
	free(text);
	json_decref(doc);
	return rc;
}

/* --- applying --- */

/* Is <v> absent, or an integer in lo..hi? */
static int int_ok(const json_t *v, json_int_t lo, json_int_t hi)
{
	return !v ||
	       (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi);
}

/* Is <e> an entry as the file holds them? NULL, or what is wrong with it. */
static const char *entry_wrong(const json_t *e)
{
	const char *source = json_string_value(json_object_get(e, "source"));
	const json_t *state = json_object_get(e, "state"), *removed = json_object_get(e, "removed");
	if (!json_is_object(e))
		return "a backend entry is not an object";
	if (!json_string_value(json_object_get(e, "address")))
		return "a backend entry has no \"address\"";
	if (!source || (strcmp(source, "api") != 0 && strcmp(source, "config") != 0))
		return "a backend entry's \"source\" is not \"api\" or \"config\"";
	if (!int_ok(json_object_get(e, "weight"), 1, MANAGE_WEIGHT_MAX) ||
	    !int_ok(json_object_get(e, "max_concurrency"), 0, MANAGE_CAP_MAX))
		return "a backend entry's weight or max_concurrency is out of range";
	if (state && (!json_is_string(state) || manage_state_of(json_string_value(state)) < 0))
		return "a backend entry's \"state\" is not enabled, draining or disabled";
	if (removed && !json_is_boolean(removed))
		return "a backend entry's \"removed\" is not true or false";
	return NULL;
}

static const char *document_wrong(const json_t *doc)
{
	const json_t *pools = json_object_get(doc, "pools"), *list;
	const char *name;
	if (!json_is_object(doc))
		return "not a JSON object";
	if (!json_is_integer(json_object_get(doc, "version")) ||
	    json_integer_value(json_object_get(doc, "version")) != STATEFILE_VERSION)
		return "no \"version\": 1";
	if (!int_ok(json_object_get(doc, "maintenance"), 0, MANAGE_RETRY_MAX))
		return "\"maintenance\" is not a number of seconds";
	if (pools && !json_is_object(pools))
		return "\"pools\" is not an object";
	json_object_foreach((json_t *)pools, name, list)
	{
		size_t i;
		const json_t *e;
		if (!json_is_array(list))
			return "a pool's entry is not a list";
		json_array_foreach(list, i, e)
		{
			const char *why = entry_wrong(e);
			if (why)
				return why;
		}
	}
	return NULL;
}

/* Apply entry <e> to pool <p> of <conf>'s runtime. */
static void apply_entry(const struct conf *conf, struct pool_rt *p, const json_t *e,
			const char *who)
{
	char err[300];
	const char *addr = json_string_value(json_object_get(e, "address"));
	const json_t *w = json_object_get(e, "weight"),
		     *cap = json_object_get(e, "max_concurrency");
	const char *state = json_string_value(json_object_get(e, "state"));
	int api = strcmp(json_string_value(json_object_get(e, "source")), "api") == 0;
	struct backend *b = manage_find(p, addr);
	int rc = 0;
	if (!b && !api) {
		log_warn("%s: pool %s has no backend %s in the config any more: skipped", who,
			 p->conf->name, addr);
		return;
	}
	if (!b || (api && !backend_present(b))) {
		rc = manage_check_address(conf, addr, err, sizeof(err));
		if (!rc)
			rc =
			    manage_add(p, addr, w ? (unsigned)json_integer_value(w) : 0,
				       cap ? (unsigned)json_integer_value(cap) : MANAGE_CAP_DEFAULT,
				       who, &b, err, sizeof(err));
	} else {
		if (w && (unsigned)json_integer_value(w) != atomic_load(&b->weight))
			rc = manage_set_weight(p, b, (unsigned)json_integer_value(w), who, err,
					       sizeof(err));
		if (!rc && cap && (unsigned)json_integer_value(cap) != atomic_load(&b->max_conc))
			rc = manage_set_cap(p, b, (unsigned)json_integer_value(cap), who, err,
					    sizeof(err));
	}
	if (!rc && state && manage_state_of(state) != BACKEND_ENABLED)
		rc = manage_set_state(p, b, manage_state_of(state), who, err, sizeof(err));
	if (!rc && json_is_true(json_object_get(e, "removed")))
		rc = manage_remove(p, b, who, err, sizeof(err));
	if (rc < 0)
		log_warn("%s: pool %s, backend %s: %s: skipped", who, p->conf->name, addr, err);
}

/* Apply document <doc> (its shape checked) over <rt>; <who> for the log. */
static void apply_document(struct runtime *rt, const json_t *doc, const char *who)
{
	const char *name;
	json_t *list;
	json_object_foreach(json_object_get(doc, "pools"), name, list)
	{
		struct pool_rt *p = manage_pool(rt, name);
		size_t i;
		json_t *e;
		if (!p) {
			log_warn("%s: pool %s is not in the config any more: its %zu entries are "
				 "skipped",
				 who, name, json_array_size(list));
			continue;
		}
		json_array_foreach(list, i, e) apply_entry(rt->conf, p, e, who);
	}
	const json_t *m = json_object_get(doc, "maintenance");
	char err[128];
	if (m && json_integer_value(m))
		manage_set_maintenance(rt, (unsigned)json_integer_value(m), who, err, sizeof(err));
}

/* May a state file owned by <uid> be believed? Root's, the service user's, or the
 * running user's. */
static int owner_trusted(const struct runtime *rt, uid_t uid)
{
	if (uid == 0 || uid == geteuid())
		return 1;
	const char *user = rt->conf ? rt->conf->user : NULL;
	const struct passwd *pw = user ? getpwnam(user) : NULL;
	return pw && pw->pw_uid == uid;
}

/* Open the directory holding <path>, if only trusted users can change its names (owned by
 * one, writable by no one else, or sticky): a descriptor, -ENOENT, or -EINVAL with <err>. */
static int open_dir_trusted(const struct runtime *rt, const char *path, char *err, size_t errlen)
{
	struct stat st;
	char *copy = strdup(path);
	if (!copy) {
		snprintf(err, errlen, "state file %s: out of memory", path);
		return -EINVAL;
	}
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		snprintf(err, errlen, "state file %s: its directory: %s", path, strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0 || !owner_trusted(rt, st.st_uid) ||
	    ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))) {
		snprintf(err, errlen,
			 "state file %s: its directory is owned by uid %u with mode %04o, refused "
			 "(others could put another file in its place: it must be owned by root or "
			 "the service user and writable by its owner alone, or sticky)",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* Open <path> for applying, if it may be believed: a descriptor, -ENOENT when there is no
 * file, or -EINVAL with <err> saying why it is refused. */
static int open_trusted(const struct runtime *rt, const char *path, char *err, size_t errlen)
{
	struct stat st;
	char *copy = strdup(path);
	if (!copy) {
		snprintf(err, errlen, "state file %s: out of memory", path);
		return -EINVAL;
	}
	int dfd = open_dir_trusted(rt, path, err, errlen);
	if (dfd < 0) {
		free(copy);
		return dfd;
	}
	/* the name in the directory just judged: no swap of the directory in between */
	int fd = openat(dfd, basename(copy), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int e = errno;
	free(copy);
	close(dfd);
	errno = e;
	if (fd < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		if (errno == ELOOP)
			snprintf(err, errlen, "state file %s: a symbolic link, refused", path);
		else
			snprintf(err, errlen, "state file %s: %s", path, strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "state file %s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > STATEFILE_MAX_BYTES) {
		snprintf(err, errlen, "state file %s: not a regular file of at most %u bytes", path,
			 STATEFILE_MAX_BYTES);
		goto fail;
	}
	if (!owner_trusted(rt, st.st_uid) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(err, errlen,
			 "state file %s: owned by uid %u with mode %04o, refused (it must be owned "
			 "by root or the service user and writable by its owner alone)",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -EINVAL;
}

int statefile_apply(struct runtime *rt, const char *path, char *err, size_t errlen)
{
	json_error_t je;
	const char *why;
	char what[4200];
	int fd = open_trusted(rt, path, err, errlen);
	if (fd == -ENOENT)
		return 0; /* nothing changed yet */
	if (fd < 0)
		return -EINVAL;
	json_t *doc = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
	close(fd);
	if (!doc) { /* where, never what: the file's words stay out of the log */
		snprintf(err, errlen, "state file %s: not JSON (line %d, column %d)", path, je.line,
			 je.column);
		return -EINVAL;
	}
	if ((why = document_wrong(doc))) {
		snprintf(err, errlen, "state file %s: not a state file: %s", path, why);
		json_decref(doc);
		return -EINVAL;
	}
	snprintf(what, sizeof(what), "state file %s", path);
	apply_document(rt, doc, what);
	json_decref(doc);
	return 0;
}

void statefile_start(struct runtime *rt, const char *path)
{
	char err[512], bad[4096];
	int exists = access(path, F_OK) == 0;
	if (statefile_apply(rt, path, err, sizeof(err)) == 0) {
		if (exists)
			log_info("admin: state file %s applied", path);
		return;
	}
	snprintf(bad, sizeof(bad), "%s.bad", path);
	if (rename(path, bad) == 0)
		log_warn("%s: it is ignored and kept as %s; the proxy starts from its config", err,
			 bad);
	else
		log_warn("%s: it is ignored (and cannot be renamed to %s: %s)", err, bad,
			 strerror(errno));
}

int statefile_carry(struct runtime *to, const struct runtime *from)
{
	json_t *doc = document_of(from);
	if (!doc)
		return -ENOMEM;
	apply_document(to, doc, "reload");
	json_decref(doc);
	return 0;
}
