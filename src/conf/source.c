/*
 * source.c - one YAML document from a config file, the files it includes and the
 * environment.
 *
 * The main file is parsed whole; then every scalar that is a value (never a key) has its
 * ${...} references expanded in place, the text it was written as kept beside it. Its
 * top-level `include:` (a path or glob, or a list of them, relative to the including file)
 * names files whose top-level keys are merged into the main document: each included file is
 * parsed into a document of its own and its nodes copied over, expanded as they are copied,
 * each one remembering its file, line and column. A key the main document lacks is added; a
 * key both give is appended to when both values are lists (pools, routes, listen, ...), and
 * refused otherwise, naming both places. An included file's own includes are merged after
 * its keys, depth first; a file including one of its includers, a chain deeper than
 * CONF_INCLUDE_DEPTH_MAX, or a name that is not a regular file (a glob matching a directory, a
 * FIFO that would hold a reload until written to) is refused. Values that expand to more than
 * CONF_EXPANDED_MAX bytes in all are refused too: a large variable named many times cannot
 * take a reload's memory. The `include:` key itself stays in the main document for the
 * schema, which reads it as nothing.
 *
 * What the schema reports about a node it finds here: conf_source_file() gives the node's
 * file, conf_source_orig() the ${...} text a message shows instead of the value.
 */
#include "conf/source.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct conf_source {
	yaml_document_t doc;
	int have_doc;
	char **files; /* files[0] the main one, as named */
	size_t nfiles;
	size_t *file_of; /* per node (id - 1): its file's index */
	char **orig;	 /* per node (id - 1): its text before expansion, or NULL */
	size_t nnodes, cap;
	struct conf_error *err;
	char *chain[CONF_INCLUDE_DEPTH_MAX]; /* real paths of the files being included */
	size_t depth;
	size_t expanded; /* bytes the environment's values added, all files together */
};

static int src_fail(struct conf_source *s, const char *file, size_t line, size_t col,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int src_fail(struct conf_source *s, const char *file, size_t line, size_t col,
		    const char *fmt, ...)
{
	va_list ap;
	int len = snprintf(s->err->msg, sizeof(s->err->msg), "%s:%zu:%zu: ", file, line, col);
	if (len < 0 || (size_t)len >= sizeof(s->err->msg))
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(s->err->msg + len, sizeof(s->err->msg) - (size_t)len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int name_char(char c, int first)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

/* Append <n> bytes of <p> to the growing string *buf (*len used, *cap allocated). */
static int put(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t want = (*len + n + 1) * 2;
		char *b = realloc(*buf, want);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = want;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

int conf_source_expand(const char *in, char **out, size_t *at, char *var, size_t varlen)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	const char *p = in, *done = in;
	int rc = 0;

	*out = NULL;
	while ((p = strchr(p, '$'))) {
		if (p[1] == '$' && p[2] != '{') { /* "$$" stays: only "$${" is an escape */
			p += 2;
			continue;
		}
		if (p[1] != '$' && p[1] != '{') {
			p++;
			continue;
		}
		if ((rc = put(&buf, &len, &cap, done, (size_t)(p - done))) < 0)
			goto fail;
		*at = (size_t)(p - in);
		if (p[1] == '$') {
			if ((rc = put(&buf, &len, &cap, "$", 1)) < 0)
				goto fail;
			done = p += 2;
			continue;
		}
		const char *name = p + 2, *e = name;
		while (name_char(*e, e == name))
			e++;
		size_t nlen = (size_t)(e - name);
		snprintf(var, varlen, "%.*s", (int)(nlen < 128 ? nlen : 128), name);
		const char *def = NULL, *close = e;
		if (e[0] == ':' && e[1] == '-') {
			def = e + 2;
			close = strchr(def, '}');
		}
		if (!nlen || nlen > 128 || !close || *close != '}') {
			rc = -EINVAL;
			goto fail;
		}
		char key[129];
		memcpy(key, name, nlen);
		key[nlen] = '\0';
		const char *val = getenv(key);
		if (def && (!val || !*val))
			rc = put(&buf, &len, &cap, def, (size_t)(close - def));
		else if (val)
			rc = put(&buf, &len, &cap, val, strlen(val));
		else
			rc = -ENOENT;
		if (rc < 0)
			goto fail;
		done = p = close + 1;
	}
	if (!buf)
		return 0;
	if ((rc = put(&buf, &len, &cap, done, strlen(done))) < 0)
		goto fail;
	*out = buf;
	return 0;
fail:
	free(buf);
	return rc;
}

/* Make room for the per-node arrays up to the document's node count. */
static int track_nodes(struct conf_source *s, size_t file)
{
	size_t n = (size_t)(s->doc.nodes.top - s->doc.nodes.start);
	if (n > s->cap) {
		size_t want = n * 2 + 16;
		size_t *f = realloc(s->file_of, want * sizeof(*f));
		if (!f)
			return -ENOMEM;
		s->file_of = f;
		char **o = realloc(s->orig, want * sizeof(*o));
		if (!o)
			return -ENOMEM;
		s->orig = o;
		s->cap = want;
	}
	for (; s->nnodes < n; s->nnodes++) {
		s->file_of[s->nnodes] = file;
		s->orig[s->nnodes] = NULL;
	}
	return 0;
}

/*
 * Expand the scalar <n> (of file <file>) into *value (NULL: unchanged; else malloc'd). A
 * failed reference is reported where its '$' stands: on the scalar's own line when it is
 * written on one (plain, or quoted with no escapes), else at the scalar.
 */
static int expand_value(struct conf_source *s, const yaml_node_t *n, size_t file, char **value)
{
	char var[130] = "";
	size_t at = 0;
	int rc =
	    conf_source_expand((const char *)n->data.scalar.value, value, &at, var, sizeof(var));
	if (rc == -ENOMEM)
		return src_fail(s, s->files[file], n->start_mark.line + 1, n->start_mark.column + 1,
				"out of memory");
	if (!rc && *value && (s->expanded += strlen(*value)) > CONF_EXPANDED_MAX) {
		free(*value);
		*value = NULL;
		return src_fail(s, s->files[file], n->start_mark.line + 1, n->start_mark.column + 1,
				"the config's values are more than %u MiB once ${...} is expanded "
				"(a large variable referenced many times?)",
				CONF_EXPANDED_MAX >> 20);
	}
	if (rc < 0) {
		size_t col = n->start_mark.column + 1;
		yaml_scalar_style_t st = n->data.scalar.style;
		const char *v = (const char *)n->data.scalar.value;
		int one_line = n->start_mark.line == n->end_mark.line && !memchr(v, '\n', at);
		if (one_line &&
		    (st == YAML_PLAIN_SCALAR_STYLE || st == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		     (st == YAML_DOUBLE_QUOTED_SCALAR_STYLE && !memchr(v, '\\', at))))
			col += at + (st != YAML_PLAIN_SCALAR_STYLE);
		if (rc == -ENOENT)
			return src_fail(s, s->files[file], n->start_mark.line + 1, col,
					"${%s} is not set in the environment: set it, or give a "
					"default as ${%s:-default}",
					var, var);
		return src_fail(s, s->files[file], n->start_mark.line + 1, col,
				"a malformed ${...}: expected ${NAME} or ${NAME:-default} (NAME "
				"letters, digits and '_'); write $${ for a literal '${'");
	}
	return 0;
}

/* Expand every value scalar of the main document (its keys are left as written). */
static int expand_main(struct conf_source *s)
{
	size_t n = s->nnodes;
	unsigned char *is_key = calloc(n ? n : 1, 1);
	int rc = 0;
	if (!is_key)
		return src_fail(s, s->files[0], 1, 1, "out of memory");
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *m = &s->doc.nodes.start[i];
		if (m->type != YAML_MAPPING_NODE)
			continue;
		for (yaml_node_pair_t *p = m->data.mapping.pairs.start;
		     p < m->data.mapping.pairs.top; p++)
			if (p->key >= 1 && (size_t)p->key <= n)
				is_key[p->key - 1] = 1;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		yaml_node_t *v = &s->doc.nodes.start[i];
		char *value = NULL;
		if (v->type != YAML_SCALAR_NODE || is_key[i] ||
		    (rc = expand_value(s, v, 0, &value)) < 0 || !value)
			continue;
		s->orig[i] = (char *)v->data.scalar.value; /* the node owns the value now */
		v->data.scalar.value = (yaml_char_t *)value;
		v->data.scalar.length = strlen(value);
	}
	free(is_key);
	return rc;
}

static int parse(struct conf_source *s, yaml_parser_t *parser, yaml_document_t *doc,
		 const char *file)
{
	if (yaml_parser_load(parser, doc))
		return 0;
	return src_fail(s, file, parser->problem_mark.line + 1, parser->problem_mark.column + 1,
			"YAML syntax: %s%s%s",
			parser->problem ? parser->problem : "malformed document",
			parser->context ? " " : "", parser->context ? parser->context : "");
}

/* What copying one included file's nodes needs. */
struct copy {
	struct conf_source *s;
	yaml_document_t *from;
	size_t file;
	size_t budget; /* nodes it may still add */
};

/* Copy node <id> of c->from (a key when <key>: not expanded) into the main document;
 * its new id in *out. */
static int copy_node(struct copy *c, int id, int key, unsigned depth, int *out)
{
	struct conf_source *s = c->s;
	yaml_node_t *n = yaml_document_get_node(c->from, id);
	const char *file = s->files[c->file];
	int nid = 0, rc;
	if (!n)
		return src_fail(s, file, 1, 1, "a node that is not there");
	if (!c->budget-- || depth > 64)
		return src_fail(s, file, n->start_mark.line + 1, n->start_mark.column + 1,
				"too many or too deeply nested values (at most %d)",
				CONF_INCLUDE_NODES_MAX);
	yaml_mark_t start = n->start_mark, end = n->end_mark;
	char *orig = NULL, *value = NULL;
	switch (n->type) {
	case YAML_SCALAR_NODE: /* <n> stays as written: an alias may copy it again */
		if (!key && (rc = expand_value(s, n, c->file, &value)) < 0)
			return rc;
		if (value && !(orig = strdup((const char *)n->data.scalar.value))) {
			free(value);
			return src_fail(s, file, start.line + 1, start.column + 1, "out of memory");
		}
		nid = yaml_document_add_scalar(
		    &s->doc, n->tag, value ? (yaml_char_t *)value : n->data.scalar.value,
		    value ? (int)strlen(value) : (int)n->data.scalar.length, n->data.scalar.style);
		free(value);
		if (!nid) {
			free(orig);
			return src_fail(s, file, start.line + 1, start.column + 1,
					"out of memory, or a value that is not UTF-8");
		}
		break;
	case YAML_SEQUENCE_NODE:
		nid = yaml_document_add_sequence(&s->doc, n->tag, n->data.sequence.style);
		for (size_t i = 0; nid; i++) {
			n = yaml_document_get_node(c->from, id);
			if (n->data.sequence.items.start + i >= n->data.sequence.items.top)
				break;
			int item;
			if ((rc = copy_node(c, n->data.sequence.items.start[i], 0, depth + 1,
					    &item)) < 0)
				return rc;
			if (!yaml_document_append_sequence_item(&s->doc, nid, item))
				nid = 0;
		}
		break;
	case YAML_MAPPING_NODE:
		nid = yaml_document_add_mapping(&s->doc, n->tag, n->data.mapping.style);
		for (size_t i = 0; nid; i++) {
			n = yaml_document_get_node(c->from, id);
			if (n->data.mapping.pairs.start + i >= n->data.mapping.pairs.top)
				break;
			yaml_node_pair_t p = n->data.mapping.pairs.start[i];
			int k, v;
			if ((rc = copy_node(c, p.key, 1, depth + 1, &k)) < 0 ||
			    (rc = copy_node(c, p.value, 0, depth + 1, &v)) < 0)
				return rc;
			if (!yaml_document_append_mapping_pair(&s->doc, nid, k, v))
				nid = 0;
		}
		break;
	default:
		break;
	}
	if (!nid || track_nodes(s, c->file) < 0) {
		free(orig);
		return src_fail(s, file, start.line + 1, start.column + 1, "out of memory");
	}
	yaml_node_t *made = yaml_document_get_node(&s->doc, nid);
	made->start_mark = start;
	made->end_mark = end;
	s->orig[nid - 1] = orig;
	*out = nid;
	return 0;
}

/* The value of <key> in the main document's root mapping, or 0. */
static int root_value(struct conf_source *s, const char *key)
{
	yaml_node_t *root = yaml_document_get_root_node(&s->doc);
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = yaml_document_get_node(&s->doc, p->key);
		if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
			return p->value;
	}
	return 0;
}

static int include_list(struct conf_source *s, int list, size_t file);

/* Merge the top-level pair <p> of c->from into the main root. */
static int merge_pair(struct copy *c, const yaml_node_pair_t *p, int *include)
{
	struct conf_source *s = c->s;
	yaml_node_t *k = yaml_document_get_node(c->from, p->key);
	yaml_node_t *v = yaml_document_get_node(c->from, p->value);
	const char *file = s->files[c->file];
	if (k->type != YAML_SCALAR_NODE)
		return src_fail(s, file, k->start_mark.line + 1, k->start_mark.column + 1,
				"config: keys must be plain strings");
	const char *name = (const char *)k->data.scalar.value;
	if (!strcmp(name, "include")) {
		if (*include)
			return src_fail(s, file, k->start_mark.line + 1, k->start_mark.column + 1,
					"config: key 'include' is given twice");
		return copy_node(c, p->value, 0, 0, include);
	}
	int have = root_value(s, name), nk, nv, rc;
	if (!have) {
		int root = (int)(yaml_document_get_root_node(&s->doc) - s->doc.nodes.start) + 1;
		if ((rc = copy_node(c, p->key, 1, 0, &nk)) < 0 ||
		    (rc = copy_node(c, p->value, 0, 0, &nv)) < 0)
			return rc;
		if (!yaml_document_append_mapping_pair(&s->doc, root, nk, nv))
			return src_fail(s, file, 1, 1, "out of memory");
		return 0;
	}
	yaml_node_t *old = yaml_document_get_node(&s->doc, have);
	if (old->type != YAML_SEQUENCE_NODE || v->type != YAML_SEQUENCE_NODE) {
		yaml_mark_t m = old->start_mark;
		return src_fail(s, file, k->start_mark.line + 1, k->start_mark.column + 1,
				"'%s' is given here and at %s:%zu:%zu: only lists (listen, pools, "
				"routes, trusted_proxies, ...) may be given in more than one file",
				name, s->files[s->file_of[have - 1]], m.line + 1, m.column + 1);
	}
	for (size_t i = 0;; i++) {
		v = yaml_document_get_node(c->from, p->value);
		if (v->data.sequence.items.start + i >= v->data.sequence.items.top)
			break;
		if ((rc = copy_node(c, v->data.sequence.items.start[i], 0, 0, &nv)) < 0)
			return rc;
		if (!yaml_document_append_sequence_item(&s->doc, have, nv))
			return src_fail(s, file, 1, 1, "out of memory");
	}
	return 0;
}

/* Merge the file <path>, named by include item <at> of file <by>. */
static int include_file(struct conf_source *s, const char *path, const yaml_node_t *at, size_t by)
{
	const char *byname = s->files[by];
	size_t line = at->start_mark.line + 1, col = at->start_mark.column + 1;
	char real[PATH_MAX];
	yaml_document_t doc;
	yaml_parser_t parser;
	int rc, include = 0;

	if (!realpath(path, real))
		return src_fail(s, byname, line, col, "include: '%s': %s", path, strerror(errno));
	for (size_t i = 0; i < s->depth; i++)
		if (!strcmp(s->chain[i], real))
			return src_fail(s, byname, line, col,
					"include: '%s' includes itself (through %s)", path,
					s->files[by]);
	if (s->depth >= CONF_INCLUDE_DEPTH_MAX)
		return src_fail(s, byname, line, col, "include: '%s' is more than %d files deep",
				path, CONF_INCLUDE_DEPTH_MAX);
	char **files = realloc(s->files, (s->nfiles + 1) * sizeof(*files));
	if (!files)
		return src_fail(s, byname, line, col, "out of memory");
	s->files = files;
	if (!(s->files[s->nfiles] = strdup(path)))
		return src_fail(s, byname, line, col, "out of memory");
	size_t file = s->nfiles++;
	/* a FIFO would block a reload until someone writes to it; a directory or a device is
	 * no config: only a regular file is read */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return src_fail(s, byname, line, col, "include: '%s': cannot open: %s", path,
				strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return src_fail(s, byname, line, col,
				"include: '%s' is not a regular file (a directory, FIFO, socket "
				"or device)",
				path);
	}
	FILE *f = fdopen(fd, "rb");
	if (!f) {
		close(fd);
		return src_fail(s, byname, line, col, "out of memory");
	}
	if (!yaml_parser_initialize(&parser)) {
		fclose(f);
		return src_fail(s, byname, line, col, "out of memory");
	}
	yaml_parser_set_input_file(&parser, f);
	rc = parse(s, &parser, &doc, path);
	yaml_parser_delete(&parser);
	fclose(f);
	if (rc < 0)
		return rc;
	if (!(s->chain[s->depth] = strdup(real))) {
		yaml_document_delete(&doc);
		return src_fail(s, byname, line, col, "out of memory");
	}
	s->depth++;
	struct copy c = {.s = s, .from = &doc, .file = file, .budget = CONF_INCLUDE_NODES_MAX};
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (root && root->type != YAML_MAPPING_NODE)
		rc = src_fail(s, path, root->start_mark.line + 1, root->start_mark.column + 1,
			      "an included file holds top-level keys (a mapping), found %s",
			      root->type == YAML_SEQUENCE_NODE ? "a list" : "a scalar");
	for (size_t i = 0; root && !rc; i++) {
		root = yaml_document_get_root_node(&doc);
		if (root->data.mapping.pairs.start + i >= root->data.mapping.pairs.top)
			break;
		yaml_node_pair_t p = root->data.mapping.pairs.start[i];
		rc = merge_pair(&c, &p, &include);
	}
	yaml_document_delete(&doc);
	if (!rc && include)
		rc = include_list(s, include, file);
	free(s->chain[--s->depth]);
	return rc;
}

/* One include item <n> of file <file>: a path, or a glob that must match. */
static int include_item(struct conf_source *s, yaml_node_t *n, size_t file)
{
	const char *by = s->files[file];
	size_t line = n->start_mark.line + 1, col = n->start_mark.column + 1;
	if (n->type != YAML_SCALAR_NODE || !n->data.scalar.length)
		return src_fail(s, by, line, col, "include: expected a file name or a glob");
	const char *pat = (const char *)n->data.scalar.value, *slash = strrchr(by, '/');
	char path[PATH_MAX];
	int len = pat[0] == '/' || !slash
		      ? snprintf(path, sizeof(path), "%s", pat)
		      : snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - by), by, pat);
	if (len < 0 || (size_t)len >= sizeof(path))
		return src_fail(s, by, line, col, "include: the path is too long");
	if (!strpbrk(pat, "*?["))
		return include_file(s, path, n, file);
	glob_t g;
	int rc = glob(path, 0, NULL, &g);
	if (rc == GLOB_NOMATCH)
		rc = src_fail(s, by, line, col,
			      "include: '%s' matches no file (a glob must match one)", path);
	else if (rc)
		rc = src_fail(s, by, line, col, "include: '%s': cannot read its folder", path);
	for (size_t i = 0; !rc && i < g.gl_pathc; i++) {
		int id = (int)(n - s->doc.nodes.start) + 1; /* n moves as nodes are added */
		rc = include_file(s, g.gl_pathv[i], n, file);
		n = yaml_document_get_node(&s->doc, id);
	}
	globfree(&g);
	return rc;
}

/* The value <list> (a node of the main document) of file <file>'s include: key. */
static int include_list(struct conf_source *s, int list, size_t file)
{
	yaml_node_t *n = yaml_document_get_node(&s->doc, list);
	if (n->type == YAML_SCALAR_NODE)
		return include_item(s, n, file);
	if (n->type != YAML_SEQUENCE_NODE)
		return src_fail(s, s->files[file], n->start_mark.line + 1, n->start_mark.column + 1,
				"include: expected a file name, a glob, or a list of them");
	for (size_t i = 0;; i++) {
		n = yaml_document_get_node(&s->doc, list);
		if (n->data.sequence.items.start + i >= n->data.sequence.items.top)
			return 0;
		int rc = include_item(
		    s, yaml_document_get_node(&s->doc, n->data.sequence.items.start[i]), file);
		if (rc)
			return rc;
	}
}

static int source_load(const char *name, yaml_parser_t *parser, int includes,
		       struct conf_source **out, struct conf_error *err)
{
	struct conf_source *s = calloc(1, sizeof(*s));
	int rc = -ENOMEM;
	if (!s || !(s->files = calloc(1, sizeof(*s->files))) || !(s->files[0] = strdup(name))) {
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", name);
		goto fail;
	}
	s->nfiles = 1;
	s->err = err;
	if ((rc = parse(s, parser, &s->doc, name)) < 0)
		goto fail;
	s->have_doc = 1;
	if (track_nodes(s, 0) < 0) {
		rc = src_fail(s, name, 1, 1, "out of memory");
		goto fail;
	}
	if ((rc = expand_main(s)) < 0)
		goto fail;
	yaml_node_t *root = yaml_document_get_root_node(&s->doc);
	int inc = root && root->type == YAML_MAPPING_NODE ? root_value(s, "include") : 0;
	if (inc && !includes) {
		yaml_node_t *n = yaml_document_get_node(&s->doc, inc);
		rc = src_fail(s, name, n->start_mark.line + 1, n->start_mark.column + 1,
			      "include: only a config read from a file may include others");
		goto fail;
	}
	if (inc) {
		char real[PATH_MAX];
		if (!realpath(name, real) || !(s->chain[0] = strdup(real))) {
			rc =
			    src_fail(s, name, 1, 1, "cannot resolve the path: %s", strerror(errno));
			goto fail;
		}
		s->depth = 1;
		rc = include_list(s, inc, 0);
		free(s->chain[0]);
		s->depth = 0;
		if (rc < 0)
			goto fail;
	}
	*out = s;
	return 0;
fail:
	conf_source_free(s);
	return rc;
}

int conf_source_load_string(const char *name, const char *text, size_t len,
			    struct conf_source **out, struct conf_error *err)
{
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", name);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	int rc = source_load(name, &parser, 0, out, err);
	yaml_parser_delete(&parser);
	return rc;
}

int conf_source_load_file(const char *path, struct conf_source **out, struct conf_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		snprintf(err->msg, sizeof(err->msg), "%s: cannot open: %s", path, strerror(e));
		return -e;
	}
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser)) {
		fclose(f);
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", path);
		return -ENOMEM;
	}
	yaml_parser_set_input_file(&parser, f);
	int rc = source_load(path, &parser, 1, out, err);
	yaml_parser_delete(&parser);
	fclose(f);
	return rc;
}

void conf_source_free(struct conf_source *s)
{
	if (!s)
		return;
	if (s->have_doc)
		yaml_document_delete(&s->doc);
	for (size_t i = 0; i < s->nnodes; i++)
		free(s->orig[i]);
	free(s->orig);
	free(s->file_of);
	for (size_t i = 0; i < s->nfiles; i++)
		free(s->files[i]);
	free(s->files);
	free(s);
}

yaml_document_t *conf_source_doc(struct conf_source *s)
{
	return &s->doc;
}

/* Node <n>'s index in the document, or nnodes when it is not one of its. */
static size_t node_index(const struct conf_source *s, const yaml_node_t *n)
{
	if (!s->have_doc || n < s->doc.nodes.start || n >= s->doc.nodes.top)
		return s->nnodes;
	size_t i = (size_t)(n - s->doc.nodes.start);
	return i < s->nnodes ? i : s->nnodes;
}

const char *conf_source_file(const struct conf_source *s, const yaml_node_t *n)
{
	size_t i = node_index(s, n);
	return i < s->nnodes ? s->files[s->file_of[i]] : NULL;
}

const char *conf_source_orig(const struct conf_source *s, const yaml_node_t *n)
{
	size_t i = node_index(s, n);
	return i < s->nnodes ? s->orig[i] : NULL;
}
