/*
 * schema_forward.c - routes[].rewrite, request_headers, response_headers, api_key_file and
 * api_key_header (see schema_forward.h).
 *
 * What may not be configured, refused with its place: a header that frames the message or
 * belongs to one hop (Connection, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade,
 * Content-Length, every Proxy-* field), Host (routes[].rewrite.host sets it), and the fields
 * the proxy writes itself (X-Forwarded-For, X-Forwarded-Proto, X-Request-Id, traceparent,
 * X-Accelnet-Timing), each also in its '_' spelling, which CGI-style backends read alike; a
 * value with a control byte (CR, LF, NUL...); a rewrite whose parts cannot make a path; a
 * key file that does not hold one line of printable characters.
 */
#include "conf/schema_forward.h"
#include "core/log.h"
#include "core/secret.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FWD_VAR_NAME(id, name) name,
static const char *const var_names[FWD_NVARS] = {"", FWD_VARS(FWD_VAR_NAME)};
#undef FWD_VAR_NAME

const char *fwd_var_name(unsigned v)
{
	return v < FWD_NVARS ? var_names[v] : "";
}

/* <name> is <lit> case-insensitively, '_' taken for '-'. */
static int same_name(const char *name, const char *lit)
{
	for (; *name && *lit; name++, lit++) {
		char a = *name == '_' ? '-' : *name, b = *lit == '_' ? '-' : *lit;
		if (tolower((unsigned char)a) != tolower((unsigned char)b))
			return 0;
	}
	return !*name && !*lit;
}

/* Why <name> may not be added, set or removed; NULL: it may. */
static const char *forbidden_why(const char *name)
{
	static const char *const hop[] = {"connection",	   "keep-alive",	"te",
					  "trailer",	   "transfer-encoding", "upgrade",
					  "content-length"};
	static const char *const own[] = {"x-forwarded-for", "x-forwarded-proto", "x-request-id",
					  "traceparent", "x-accelnet-timing"};
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		if (same_name(name, hop[i]))
			return "a hop-by-hop or framing field, written by the proxy for each hop";
	if (strncasecmp(name, "proxy-", 6) == 0 || strncasecmp(name, "proxy_", 6) == 0)
		return "a hop-by-hop field (Proxy-*), never forwarded";
	if (same_name(name, "host"))
		return "Host is set by routes[].rewrite.host";
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (same_name(name, own[i]))
			return "a field the proxy writes itself";
	return NULL;
}

static struct conf_fwd *fwd_of(struct rules_ctx *x, yaml_node_t *v, void *field)
{
	struct conf_fwd **f = field;
	if (!*f && !(*f = calloc(1, sizeof(**f))))
		rules_fail(x, v, "out of memory");
	return *f;
}

static int read_name(struct rules_ctx *x, const char *what, yaml_node_t *n, char **out)
{
	const char *s = rules_scalar(n);
	if (!s || !rules_header_name_ok(s))
		return rules_fail(x, n,
				  "%s: a header name is 1-64 letters, digits, '-' or '_', found "
				  "%s",
				  what, s ? "'" : rules_kind_name(n));
	const char *why = forbidden_why(s);
	if (why)
		return rules_fail(x, n, "%s: '%s' may not be added, set or removed: %s", what, s,
				  why);
	return rules_read_string(x, n, out);
}

/* Cut <h>->text into literal pieces and %{variables}, "%%" made '%' in place. */
static int parse_value(struct rules_ctx *x, const char *what, yaml_node_t *n, struct fwd_header *h,
		       int response)
{
	char *s = h->text, *w = s;
	size_t len = strlen(s);
	if (len > FWD_VALUE_MAX)
		return rules_fail(x, n, "%s: a value is at most %d bytes", what, FWD_VALUE_MAX);
	for (size_t i = 0; i < len; i++)
		if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
			return rules_fail(x, n,
					  "%s '%s': a value may hold no control byte (CR, LF, "
					  "NUL...)",
					  what, h->name);
	const char *r = s;
	char *lit = w;
	while (*r) {
		if (r[0] != '%') {
			*w++ = *r++;
			continue;
		}
		if (r[1] == '%') {
			*w++ = '%';
			r += 2;
			continue;
		}
		const char *end = r[1] == '{' ? strchr(r, '}') : NULL;
		unsigned v = 0;
		for (unsigned k = 1; end && k < FWD_NVARS; k++)
			if ((size_t)(end - r - 2) == strlen(var_names[k]) &&
			    strncmp(r + 2, var_names[k], (size_t)(end - r - 2)) == 0)
				v = k;
		if (!v)
			return rules_fail(x, n,
					  "%s '%s': '%%' starts a variable %%{client_addr}, "
					  "%%{tenant}, %%{request_id}, %%{route}, %%{pool} or "
					  "%%{backend}; a literal '%%' is written %%%%",
					  what, h->name);
		if (v == FWD_VAR_BACKEND && !response)
			return rules_fail(x, n,
					  "%s '%s': %%{backend} is known only in "
					  "response_headers (the request head is written before "
					  "a backend is picked)",
					  what, h->name);
		if (h->npieces + 2 > FWD_PIECES_MAX)
			return rules_fail(x, n, "%s '%s': at most %d pieces", what, h->name,
					  FWD_PIECES_MAX);
		if (w > lit)
			h->piece[h->npieces++] =
			    (struct fwd_piece){FWD_LITERAL, (uint16_t)(w - lit), lit};
		h->piece[h->npieces++] = (struct fwd_piece){(uint8_t)v, 0, NULL};
		h->has_vars = 1;
		r = end + 1;
		lit = w;
	}
	if (w > lit) {
		if (h->npieces + 1 > FWD_PIECES_MAX)
			return rules_fail(x, n, "%s '%s': at most %d pieces", what, h->name,
					  FWD_PIECES_MAX);
		h->piece[h->npieces++] = (struct fwd_piece){FWD_LITERAL, (uint16_t)(w - lit), lit};
	}
	*w = 0;
	return 0;
}

/* add: / set: a mapping NAME: VALUE into a new array. */
static int read_fields(struct rules_ctx *x, yaml_node_t *v, const char *what,
		       struct fwd_header **out, size_t *count, int response)
{
	if (v->type != YAML_MAPPING_NODE)
		return rules_fail(x, v, "%s: expected a mapping NAME: VALUE, found %s", what,
				  rules_kind_name(v));
	size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	if (n > FWD_HEADERS_MAX)
		return rules_fail(x, v, "%s: at most %d fields", what, FWD_HEADERS_MAX);
	if (!(*out = calloc(n ? n : 1, sizeof(**out))))
		return rules_fail(x, v, "out of memory");
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
	     p++) {
		struct fwd_header *h = &(*out)[(*count)++];
		yaml_node_t *k = rules_node(x, p->key), *val = rules_node(x, p->value);
		if (read_name(x, what, k, &h->name) < 0)
			return -EINVAL;
		if (!rules_scalar(val))
			return rules_fail(x, val, "%s '%s': expected a scalar value, found %s",
					  what, h->name, rules_kind_name(val));
		if (rules_read_string(x, val, &h->text) < 0 ||
		    parse_value(x, what, val, h, response) < 0)
			return -EINVAL;
	}
	return 0;
}

static int read_remove_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	(void)i;
	return read_name(x, "remove", item, (char **)obj);
}

struct headers_load {
	struct fwd_headers *h;
	int response;
};

static int read_add(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct headers_load *l = obj;
	(void)r;
	return read_fields(x, v, "add", &l->h->add, &l->h->nadd, l->response);
}

static int read_set(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct headers_load *l = obj;
	(void)r;
	return read_fields(x, v, "set", &l->h->set, &l->h->nset, l->response);
}

static int read_remove(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct headers_load *l = obj;
	(void)r;
	if (v->type == YAML_SEQUENCE_NODE &&
	    v->data.sequence.items.top - v->data.sequence.items.start > FWD_HEADERS_MAX)
		return rules_fail(x, v, "remove: at most %d fields", FWD_HEADERS_MAX);
	return rules_read_list(x, v, "remove", (void **)&l->h->remove, &l->h->nremove,
			       sizeof(char *), read_remove_item);
}

const struct rule schema_fwd_headers_rules[] = {
    {"add", RULE_SECTION, 0, 0, 0, NULL, read_add},
    {"set", RULE_SECTION, 0, 0, 0, NULL, read_set},
    {"remove", RULE_SECTION, 0, 0, 0, NULL, read_remove},
    RULES_END,
};

/* A name given twice (set twice, or both set and removed) would say two things. */
static int check_headers(struct rules_ctx *x, yaml_node_t *v, const char *what,
			 const struct fwd_headers *h)
{
	const char *names[FWD_HEADERS_MAX * 3];
	size_t n = 0;
	for (size_t i = 0; i < h->nset; i++)
		names[n++] = h->set[i].name;
	for (size_t i = 0; i < h->nremove; i++)
		names[n++] = h->remove[i];
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (same_name(names[i], names[j]))
				return rules_fail(x, v, "%s: '%s' is set or removed twice", what,
						  names[i]);
	for (size_t i = 0; i < h->nadd; i++)
		for (size_t j = 0; j < n; j++)
			if (same_name(h->add[i].name, names[j]))
				return rules_fail(x, v, "%s: '%s' is both added and set or removed",
						  what, names[j]);
	if (h->nadd + n > FWD_HEADERS_MAX)
		return rules_fail(x, v, "%s: at most %d fields in all", what, FWD_HEADERS_MAX);
	return 0;
}

static int read_headers(struct rules_ctx *x, yaml_node_t *v, void *field, int response)
{
	const char *what = response ? "response_headers" : "request_headers";
	struct conf_fwd *f = fwd_of(x, v, field);
	if (!f)
		return -EINVAL;
	struct headers_load l = {response ? &f->resp : &f->req, response};
	l.h->given = 1;
	int rc = rules_read_section(x, v, what, schema_fwd_headers_rules, &l);
	return rc ? rc : check_headers(x, v, what, l.h);
}

int schema_read_request_headers(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				void *field)
{
	(void)r;
	return read_headers(x, v, field, 0);
}

int schema_read_response_headers(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field)
{
	(void)r;
	return read_headers(x, v, field, 1);
}

/* --- rewrite --- */

/* May <s> stand in a path as it is (RFC 3986 pchar and '/': no space, '?', '#', '%' alone,
 * control or non-ASCII byte)? */
static int path_chars_ok(const char *s, int dollar)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || strchr("/-._~!&'()*+,;=:@", c) || (dollar && c == '$'))
			continue;
		if (c == '%' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
			s += 2;
			continue;
		}
		return 0;
	}
	return 1;
}

struct rewrite_load {
	struct fwd_rewrite *rw;
	yaml_node_t *regex;
};

static int read_path_part(struct rules_ctx *x, yaml_node_t *v, const char *what, char **out)
{
	const char *s = rules_scalar(v);
	if (!s || s[0] != '/' || !path_chars_ok(s, 0))
		return rules_fail(x, v,
				  "rewrite: %s must be a path starting with '/' (no space, '?', "
				  "'#' or control byte)",
				  what);
	return rules_read_string(x, v, out);
}

static int read_strip(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct rewrite_load *l = obj;
	(void)r;
	return read_path_part(x, v, "strip_prefix", &l->rw->strip_prefix);
}

static int read_prefix(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct rewrite_load *l = obj;
	(void)r;
	return read_path_part(x, v, "prefix", &l->rw->prefix);
}

static int read_host(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct rewrite_load *l = obj;
	const char *s = rules_scalar(v);
	(void)r;
	int ok = s && *s && strlen(s) <= 255;
	for (const char *p = s; ok && *p; p++)
		ok = isalnum((unsigned char)*p) || strchr("-._:[]", *p);
	if (!ok)
		return rules_fail(x, v, "rewrite: host must be a host name or address[:port]");
	return rules_read_string(x, v, &l->rw->host);
}

static int read_match(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct rewrite_load *l = obj;
	(void)r;
	if (!rules_scalar(v) || !*rules_scalar(v))
		return rules_fail(x, v, "rewrite: regex.match must be a regular expression");
	return rules_read_string(x, v, &l->rw->match);
}

static int read_replace(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct rewrite_load *l = obj;
	(void)r;
	if (!rules_scalar(v))
		return rules_fail(x, v, "rewrite: regex.replace must be a scalar");
	return rules_read_string(x, v, &l->rw->replace);
}

static const struct rule regex_rules[] = {
    {"match", RULE_SECTION, 0, 0, 0, NULL, read_match},
    {"replace", RULE_SECTION, 0, 0, 0, NULL, read_replace},
    RULES_END,
};

static int read_regex(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct rewrite_load *l = obj;
	l->regex = v;
	return rules_read_section(x, v, "regex", r->sub, obj);
}

const struct rule schema_rewrite_rules[] = {
    {"strip_prefix", RULE_SECTION, 0, 0, 0, NULL, read_strip},
    {"prefix", RULE_SECTION, 0, 0, 0, NULL, read_prefix},
    {"regex", RULE_SECTION, 0, 0, 0, regex_rules, read_regex},
    {"host", RULE_SECTION, 0, 0, 0, NULL, read_host},
    RULES_END,
};

/* The regex compiled, and its replacement checked: "$N" names a group it has, "$$" is '$',
 * and what stays literal may stand in a path. */
static int compile_regex(struct rules_ctx *x, yaml_node_t *v, struct fwd_rewrite *rw)
{
	if (!rw->match || !rw->replace)
		return rules_fail(x, v, "rewrite: regex needs both match and replace");
	int code;
	PCRE2_SIZE at;
	/* a path that is no UTF-8 (raw bytes a client sent) does not match, rather than fail */
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)rw->match, PCRE2_ZERO_TERMINATED,
				       PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
	if (!re) {
		PCRE2_UCHAR why[160];
		pcre2_get_error_message(code, why, sizeof(why));
		return rules_fail(x, rules_value_of(x, v, "match"),
				  "rewrite: regex.match: %s at offset %zu", (const char *)why,
				  (size_t)at);
	}
	rw->re = re;
	uint32_t groups = 0;
	pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &groups);
	rw->ngroups = groups;
	yaml_node_t *rn = rules_value_of(x, v, "replace");
	for (const char *p = rw->replace; *p; p++) {
		if (*p != '$')
			continue;
		if (p[1] == '$') {
			p++;
		} else if (p[1] >= '0' && p[1] <= '9') {
			if ((unsigned)(p[1] - '0') > groups)
				return rules_fail(x, rn,
						  "rewrite: regex.replace names $%c but match has "
						  "%u group%s",
						  p[1], groups, groups == 1 ? "" : "s");
			p++;
		} else {
			return rules_fail(x, rn,
					  "rewrite: regex.replace: '$' is followed by a group "
					  "number 0-9, or written $$");
		}
	}
	if (!path_chars_ok(rw->replace, 1))
		return rules_fail(x, rn,
				  "rewrite: regex.replace may hold no space, '?', '#' or control "
				  "byte (the query is kept as it came)");
	return 0;
}

int schema_read_rewrite(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_fwd *f = fwd_of(x, v, field);
	if (!f)
		return -EINVAL;
	struct rewrite_load l = {&f->rewrite, NULL};
	int rc = rules_read_section(x, v, "rewrite", r->sub, &l);
	if (rc)
		return rc;
	if (l.regex && (rc = compile_regex(x, l.regex, &f->rewrite)))
		return rc;
	f->rewrite.on = 1;
	return 0;
}

/* --- upstream credentials --- */

int schema_read_api_key_file(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_fwd *f = fwd_of(x, v, field);
	(void)r;
	if (!f)
		return -EINVAL;
	if (!rules_scalar(v) || !*rules_scalar(v))
		return rules_fail(x, v, "api_key_file: expected a file name");
	return rules_read_string(x, v, &f->api_key_file);
}

int schema_read_api_key_header(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *field)
{
	struct conf_fwd *f = fwd_of(x, v, field);
	(void)r;
	if (!f)
		return -EINVAL;
	return read_name(x, "api_key_header", v, &f->api_key_header);
}

/* Read <f>'s key file into its credential line, sent under <header> (NULL: Authorization,
 * as "Bearer KEY"). Messages name the file, never the key. */
static int load_key(struct rules_ctx *x, yaml_node_t *at, struct conf_fwd *f, const char *header)
{
	uint8_t key[FWD_API_KEY_MAX];
	size_t n = 0;
	const char *why = NULL;
	struct stat st;
	int rc = secret_load(f->api_key_file, key, sizeof(key), &n, &why);
	if (rc == -EINVAL) {
		rc = rules_fail(x, at, "api_key_file %s: expected a key of 1 to %d characters",
				f->api_key_file, FWD_API_KEY_MAX);
		goto fail;
	}
	if (rc < 0) {
		rc = rules_fail(x, at, "api_key_file %s: %s", f->api_key_file, strerror(-rc));
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		if (key[i] <= ' ' || key[i] > '~') {
			rc = rules_fail(x, at,
					"api_key_file %s: the key must be one line of printable "
					"characters without spaces",
					f->api_key_file);
			goto fail;
		}
	if (stat(f->api_key_file, &st) == 0 && (st.st_mode & 077))
		log_warn("api_key_file %s can be read by other users (chmod 600 it)",
			 f->api_key_file);
	const char *name = header ? header : "Authorization";
	size_t cap = strlen(name) + n + 16;
	if (!(f->cred_line = malloc(cap))) {
		rc = rules_fail(x, at, "out of memory");
		goto fail;
	}
	f->cred_len = (size_t)snprintf(f->cred_line, cap, "%s: %s%.*s\r\n", name,
				       header ? "" : "Bearer ", (int)n, (const char *)key);
fail:
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}

/* Does <h> add or set <name>? */
static int writes_field(const struct fwd_headers *h, const char *name)
{
	for (size_t i = 0; i < h->nset; i++)
		if (same_name(h->set[i].name, name))
			return 1;
	for (size_t i = 0; i < h->nadd; i++)
		if (same_name(h->add[i].name, name))
			return 1;
	return 0;
}

int schema_forward_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	const char *pool_header = p->fwd ? p->fwd->api_key_header : NULL;
	if (p->fwd && p->fwd->api_key_header && !p->fwd->api_key_file)
		return rules_fail(x, rules_value_of(x, item, "api_key_header"),
				  "pool '%s': api_key_header needs api_key_file", p->name);
	if (p->fwd && p->fwd->api_key_file &&
	    load_key(x, rules_value_of(x, item, "api_key_file"), p->fwd, pool_header) < 0)
		return -EINVAL;
	yaml_node_t *list = rules_value_of(x, item, "backends");
	int any = p->fwd && p->fwd->cred_line;
	for (size_t i = 0; i < p->nbackends; i++) {
		struct conf_fwd *f = p->backends[i].fwd;
		if (!f)
			continue;
		yaml_node_t *b = list && list->type == YAML_SEQUENCE_NODE
				     ? rules_node(x, list->data.sequence.items.start[i])
				     : item;
		if (f->api_key_header && !f->api_key_file)
			return rules_fail(x, rules_value_of(x, b, "api_key_header"),
					  "backend %s: api_key_header needs api_key_file",
					  p->backends[i].ep.address);
		/* the client's field of that name is dropped for the whole pool */
		if (f->api_key_header &&
		    (!pool_header || !same_name(pool_header, f->api_key_header)))
			return rules_fail(
			    x, rules_value_of(x, b, "api_key_header"),
			    "backend %s: the backends of a pool send their keys under "
			    "one header: give api_key_header on the pool",
			    p->backends[i].ep.address);
		any |= f->api_key_file != NULL;
		if (f->api_key_file &&
		    load_key(x, rules_value_of(x, b, "api_key_file"), f,
			     f->api_key_header ? f->api_key_header : pool_header) < 0)
			return -EINVAL;
	}
	if (any && !p->fwd && !(p->fwd = calloc(1, sizeof(*p->fwd))))
		return rules_fail(x, item, "out of memory");
	/* the key's field is the key's: a configured one beside it would be a second credential */
	const char *kh = pool_header ? pool_header : "Authorization";
	if (any && writes_field(&p->fwd->req, kh))
		return rules_fail(x, rules_value_of(x, item, "request_headers"),
				  "pool '%s': request_headers may not write %s, which "
				  "carries the pool's api key",
				  p->name, kh);
	if (any)
		p->fwd->any_key = 1;
	return 0;
}

int schema_forward_check_route(struct rules_ctx *x, yaml_node_t *item, const struct conf_fwd *rf,
			       const struct conf_pool *p)
{
	if (!rf || !p->fwd || !p->fwd->any_key)
		return 0;
	const char *kh = p->fwd->api_key_header ? p->fwd->api_key_header : "Authorization";
	if (!writes_field(&rf->req, kh))
		return 0;
	return rules_fail(x, rules_value_of(x, item, "request_headers"),
			  "routes: request_headers may not write %s, which carries the api "
			  "key of pool '%s'",
			  kh, p->name);
}

static void headers_free(struct fwd_headers *h)
{
	for (size_t i = 0; i < h->nadd; i++)
		free(h->add[i].name), free(h->add[i].text);
	for (size_t i = 0; i < h->nset; i++)
		free(h->set[i].name), free(h->set[i].text);
	for (size_t i = 0; i < h->nremove; i++)
		free(h->remove[i]);
	free(h->add);
	free(h->set);
	free(h->remove);
}

void conf_fwd_free(struct conf_fwd *f)
{
	if (!f)
		return;
	headers_free(&f->req);
	headers_free(&f->resp);
	free(f->rewrite.strip_prefix);
	free(f->rewrite.prefix);
	free(f->rewrite.match);
	free(f->rewrite.replace);
	free(f->rewrite.host);
	pcre2_code_free(f->rewrite.re);
	free(f->api_key_file);
	free(f->api_key_header);
	if (f->cred_line) {
		OPENSSL_cleanse(f->cred_line, f->cred_len);
		free(f->cred_line);
	}
	free(f);
}
