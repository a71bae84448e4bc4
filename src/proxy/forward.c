/*
 * forward.c - rewriting what is forwarded (see forward.h).
 *
 * A regex runs with match data kept per worker thread (made at its first rewrite, freed when
 * the thread ends): pcre2_match() allocates nothing more for a path this short. The client
 * writes the path a configured expression runs on, so a match is bounded (REGEX_MATCH_LIMIT
 * steps): one that would backtrack past it is answered 502, never a worker's second spent.
 */
#include "proxy/forward.h"
#include "core/log.h"
#include "proxy/attempt.h"
#include "runtime/pool.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The forwarded target of a rewritten request, for the access log. */
struct forward_x {
	uint8_t rewritten, cut;
	char target[ALOG_PATH_MAX + 1];
};

static size_t ctx_off;
static uint32_t bit; /* joined by a rewritten request */

const struct xhook forward_hook = {
    .name = "forward",
    .ctx_size = sizeof(struct forward_x),
    .ctx_off = &ctx_off,
    .bit = &bit,
};

const char *forward_target(const struct exchange *x, int *cut)
{
	if (!xhooks_in(x, &forward_hook))
		return NULL;
	const struct forward_x *f = xhooks_ctx(x, ctx_off);
	*cut = f->cut;
	return f->rewritten ? f->target : NULL;
}

#define REGEX_MATCH_LIMIT 100000
#define REGEX_DEPTH_LIMIT 10000

static pthread_key_t md_key;
static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static pcre2_match_context *mctx; /* the limits; only read once made */

static void md_free(void *md)
{
	pcre2_match_data_free(md);
}

static void md_key_make(void)
{
	if (pthread_key_create(&md_key, md_free) != 0 || !(mctx = pcre2_match_context_create(NULL)))
		fatal("cannot make a thread key for the rewrite regexes");
	pcre2_set_match_limit(mctx, REGEX_MATCH_LIMIT);
	pcre2_set_depth_limit(mctx, REGEX_DEPTH_LIMIT);
}

#define MATCH_GROUPS 10 /* $0 .. $9 */

static pcre2_match_data *match_data(void)
{
	pthread_once(&md_once, md_key_make);
	pcre2_match_data *md = pthread_getspecific(md_key);
	if (!md && (md = pcre2_match_data_create(MATCH_GROUPS, NULL)) &&
	    pthread_setspecific(md_key, md) != 0) {
		pcre2_match_data_free(md);
		md = NULL;
	}
	return md;
}

static int put(char *out, size_t cap, size_t *n, const char *p, size_t len)
{
	if (cap - *n < len)
		return -1;
	memcpy(out + *n, p, len);
	*n += len;
	return 0;
}

/* Replace the first match of rw->re in s[0..len) by rw->replace into out. */
static int apply_regex(const struct fwd_rewrite *rw, const char *s, size_t len, char *out,
		       size_t cap)
{
	pcre2_match_data *md = match_data();
	if (!md)
		return -1;
	int rc = pcre2_match(rw->re, (PCRE2_SPTR)s, len, 0, 0, md, mctx);
	size_t n = 0;
	if (rc == PCRE2_ERROR_NOMATCH) /* the path goes as it is */
		return put(out, cap, &n, s, len) < 0 ? -1 : (int)n;
	if (rc < 0) /* past the limits, or a path not UTF-8: no path to send */
		return -2;
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
	unsigned got = (unsigned)(rc == 0 ? MATCH_GROUPS : rc);
	if (put(out, cap, &n, s, ov[0]) < 0)
		return -1;
	for (const char *r = rw->replace; *r; r++) {
		if (r[0] == '$' && r[1] == '$') {
			r++;
		} else if (r[0] == '$' && r[1] >= '0' && r[1] <= '9') {
			unsigned g = (unsigned)(*++r - '0');
			if (g < got && ov[2 * g] != PCRE2_UNSET &&
			    put(out, cap, &n, s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]) < 0)
				return -1;
			continue;
		}
		if (put(out, cap, &n, r, 1) < 0)
			return -1;
	}
	if (put(out, cap, &n, s + ov[1], len - ov[1]) < 0)
		return -1;
	return (int)n;
}

/* Is p[i..] "%2e" or "%2E" (an encoded dot), or a dot? Its length then, else 0. */
static size_t dot_at(const char *p, size_t n, size_t i)
{
	if (i < n && p[i] == '.')
		return 1;
	if (i + 2 < n && p[i] == '%' && p[i + 1] == '2' && (p[i + 2] == 'e' || p[i + 2] == 'E'))
		return 3;
	return 0;
}

/* Is the segment at p[i..] (after a '/') "." or ".." in any spelling? */
static int dot_segment(const char *p, size_t n, size_t i)
{
	size_t d = dot_at(p, n, i);
	if (d && (i + d == n || p[i + d] == '/'))
		return 1;
	size_t e = d ? dot_at(p, n, i + d) : 0;
	return e && (i + d + e == n || p[i + d + e] == '/');
}

/*
 * A rewritten path is sent only in the normal form the route judged (docs/security.md): a
 * replacement that glues a group onto a literal ("/$1" of "/p../x") can make a dot segment a
 * backend resolves, or an encoded '/' or '\' one backend splits on and another does not.
 */
static int path_ok(const char *p, size_t n)
{
	if (!n || p[0] != '/')
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c <= ' ' || c == 0x7f || c == '?' || c == '#' ||
		    c == '\\') /* high bytes pass as they came */
			return 0;
		if (c == '/' && dot_segment(p, n, i + 1))
			return 0;
		if (c == '%' && i + 2 < n &&
		    ((p[i + 1] == '2' && (p[i + 2] | 0x20) == 'f') ||
		     (p[i + 1] == '5' && (p[i + 2] | 0x20) == 'c') || p[i + 1] == '0' ||
		     p[i + 1] == '1' || (p[i + 1] == '7' && (p[i + 2] | 0x20) == 'f')))
			return 0; /* an encoded '/', '\' or control byte */
	}
	return 1;
}

int forward_rewrite_path(const struct fwd_rewrite *rw, const char *p, size_t len, char *out,
			 size_t cap)
{
	char mid[FORWARD_TARGET_MAX];
	size_t n = 0;
	const char *rest = p;
	size_t rlen = len;
	size_t sl = rw->strip_prefix ? strlen(rw->strip_prefix) : 0;
	if (sl && len >= sl && memcmp(p, rw->strip_prefix, sl) == 0 &&
	    (len == sl || p[sl] == '/' || rw->strip_prefix[sl - 1] == '/')) {
		/* "/a" off "/a/x" leaves "/x"; off "/a" leaves "/"; "/a/" off "/a/x" too */
		rest = p + sl - (rw->strip_prefix[sl - 1] == '/');
		rlen = len - sl + (rw->strip_prefix[sl - 1] == '/');
		if (!rlen) {
			rest = "/";
			rlen = 1;
		}
	}
	char *dst = rw->re ? mid : out;
	size_t dcap = rw->re ? sizeof(mid) : cap;
	if (rw->prefix) {
		size_t pl = strlen(rw->prefix);
		if (pl && rw->prefix[pl - 1] == '/' && rest[0] == '/')
			pl--; /* one '/' between them, not two */
		if (put(dst, dcap, &n, rw->prefix, pl) < 0)
			return -1;
	}
	if (put(dst, dcap, &n, rest, rlen) < 0)
		return -1;
	int k = (int)n;
	if (rw->re && (k = apply_regex(rw, mid, n, out, cap)) < 0)
		return k;
	return path_ok(out, (size_t)k) ? k : -2;
}

const char *forward_cred(const struct backend *be, size_t *len)
{
	const struct conf_fwd *f =
	    be->conf->fwd && be->conf->fwd->cred_line ? be->conf->fwd : be->pool->fwd;
	if (!f || !f->cred_line)
		return NULL;
	*len = f->cred_len;
	return f->cred_line;
}

size_t forward_head_len(const struct exchange *x, const struct attempt *a)
{
	size_t cl = 0;
	if (!x->uphead)
		return 0;
	if (a->be)
		(void)forward_cred(a->be, &cl);
	return x->uphead->end + cl;
}

int forward_head_iov(const struct exchange *x, const struct attempt *a, struct iovec *iov)
{
	size_t cl = 0;
	const char *cred = a->be ? forward_cred(a->be, &cl) : NULL;
	return forward_iov(x->uphead ? x->uphead->data : NULL, x->uphead ? x->uphead->end : 0,
			   a->head_off, cred, cl, iov);
}

int forward_iov(const char *head, size_t end, size_t off, const char *cred, size_t cl,
		struct iovec *iov)
{
	if (end < 2)
		cred = NULL, cl = 0;
	size_t split = cred ? end - 2 : end; /* the head's last CRLF */
	int n = 0;
	if (off < split) {
		iov[n++] = (struct iovec){(void *)(head + off), split - off};
		off = split;
	}
	if (cred && off < split + cl) {
		iov[n++] = (struct iovec){(void *)(cred + (off - split)), split + cl - off};
		off = split + cl;
	}
	if (off < end + cl)
		iov[n++] = (struct iovec){(void *)(head + off - cl), end + cl - off};
	return n;
}

/* --- the fields --- */

/* Expand <h>'s value for <x> into s->values; NULL when the room is used up. */
static const char *expand(const struct exchange *x, const struct fwd_header *h,
			  struct forward_scratch *s)
{
	if (!h->has_vars)
		return h->text;
	char *start = s->values + s->used;
	size_t n = s->used, cap = sizeof(s->values) - 1;
	for (unsigned i = 0; i < h->npieces; i++) {
		const struct fwd_piece *p = &h->piece[i];
		const char *v = NULL;
		size_t len;
		switch (p->var) {
		case FWD_LITERAL:
			v = p->lit;
			break;
		case FWD_VAR_CLIENT_ADDR:
			v = x->peer.ip;
			break;
		case FWD_VAR_TENANT:
			v = x->peer.identity;
			break;
		case FWD_VAR_REQUEST_ID:
			v = x->names.reqid;
			break;
		case FWD_VAR_ROUTE:
			v = x->route ? x->w->rt->route_labels[x->route - x->w->conf->routes] : NULL;
			break;
		case FWD_VAR_POOL:
			v = x->pool ? x->pool->conf->name : NULL;
			break;
		case FWD_VAR_BACKEND:
			v = x->log.backend ? x->log.backend->name : NULL;
			break;
		}
		len = p->var == FWD_LITERAL ? p->len : v ? strlen(v) : 0;
		if (len && put(s->values, cap, &n, v, len) < 0)
			return NULL;
	}
	s->values[n++] = 0;
	s->used = n;
	return start;
}

/* Are field names a and b the same, as a backend reads them (case, and '_' for '-')? */
static int same_name(const char *a, const char *b)
{
	for (; *a && *b; a++, b++) {
		char c = *a == '_' ? '-' : *a, d = *b == '_' ? '-' : *b;
		if (tolower((unsigned char)c) != tolower((unsigned char)d))
			return 0;
	}
	return !*a && !*b;
}

/* Does set[from..to) set or remove <name>? */
static int edited_in(const struct forward_scratch *s, unsigned from, unsigned to, const char *name)
{
	for (unsigned i = from; i < to; i++)
		if (same_name(s->set[i].name, name))
			return 1;
	return 0;
}

/* Append <h>'s fields to the edit: set and remove into set[], add into add[]. A set of a
 * name that set[from..to) (the route's) already sets or removes is left out: the route's
 * wins over its pool's, one value sent, never both. */
static void edit_add(const struct exchange *x, const struct fwd_headers *h,
		     struct forward_scratch *s, unsigned from, unsigned to)
{
	struct rewrite_edit *e = &s->edit;
	for (size_t i = 0; i < h->nremove && e->nset < FORWARD_FIELDS_MAX; i++)
		s->set[e->nset++] = (struct rewrite_field){h->remove[i], NULL};
	for (size_t i = 0; i < h->nset && e->nset < FORWARD_FIELDS_MAX; i++) {
		if (edited_in(s, from, to, h->set[i].name))
			continue;
		const char *v = expand(x, &h->set[i], s);
		s->set[e->nset++] = (struct rewrite_field){h->set[i].name, v ? v : ""};
	}
	for (size_t i = 0; i < h->nadd && e->nadd < FORWARD_FIELDS_MAX; i++) {
		const char *v = expand(x, &h->add[i], s);
		s->add[e->nadd++] = (struct rewrite_field){h->add[i].name, v ? v : ""};
	}
}

static void edit_begin(struct forward_scratch *s)
{
	s->edit = (struct rewrite_edit){s->set, 0, s->add, 0};
	s->used = 0;
}

int forward_request(struct exchange *x, struct rewrite_request_info *info,
		    struct forward_scratch *s)
{
	const struct conf_fwd *rf = x->route->fwd, *pf = x->pool->conf->fwd;
	const struct conf_fwd *sf =
	    x->route->has_spill ? x->w->rt->pools[x->route->spill_pool].conf->fwd : NULL;
	edit_begin(s);
	if ((pf && pf->any_key) || (sf && sf->any_key)) { /* the spillover pool's too */
		/* the client's own credentials never reach a backend that takes the proxy's
		 * (api-key: Azure OpenAI's spelling, which LiteLLM and others read as well) */
		static const char *const creds[] = {"Authorization", "X-API-Key",
						    "Proxy-Authorization", "Api-Key"};
		for (size_t i = 0; i < sizeof(creds) / sizeof(creds[0]); i++)
			s->set[s->edit.nset++] = (struct rewrite_field){creds[i], NULL};
		if (pf && pf->api_key_header)
			s->set[s->edit.nset++] = (struct rewrite_field){pf->api_key_header, NULL};
		if (sf && sf->api_key_header)
			s->set[s->edit.nset++] = (struct rewrite_field){sf->api_key_header, NULL};
	}
	unsigned from = s->edit.nset;
	if (rf)
		edit_add(x, &rf->req, s, 0, 0);
	if (pf)
		edit_add(x, &pf->req, s, from, s->edit.nset);
	if (s->edit.nset || s->edit.nadd)
		info->edit = &s->edit;
	if (!rf || !rf->rewrite.on)
		return 0;
	const struct http_head *h = x->head;
	info->host = rf->rewrite.host;
	if (!rf->rewrite.strip_prefix && !rf->rewrite.prefix && !rf->rewrite.re)
		return 0;
	const char *q = memchr(h->path.p, '?', h->path.len);
	size_t plen = q ? (size_t)(q - h->path.p) : h->path.len, qlen = h->path.len - plen;
	int n = forward_rewrite_path(&rf->rewrite, h->path.p, plen, s->target, sizeof(s->target));
	if (n >= 0 && sizeof(s->target) - (size_t)n < qlen)
		n = -1;
	if (n < 0) {
		log_warn_every(10000, "route %s: rewrite of '%.*s' %s",
			       x->w->rt->route_labels[x->route - x->w->conf->routes],
			       (int)(plen > 200 ? 200 : plen), h->path.p,
			       n == -1 ? "is too long" : "makes no path (502)");
		return n == -1 ? 414 : 502;
	}
	memcpy(s->target + n, h->path.p + plen, qlen);
	info->path = (struct http_str){s->target, (uint32_t)((size_t)n + qlen)};
	if (bit) { /* (registered: not in a unit test's exchange) */
		struct forward_x *f = xhooks_join(x, &forward_hook);
		size_t k = info->path.len > ALOG_PATH_MAX ? ALOG_PATH_MAX : info->path.len;
		memcpy(f->target, s->target, k);
		f->target[k] = 0;
		f->cut = k < info->path.len;
		f->rewritten = 1;
	}
	return 0;
}

const char *forward_answer_headers(const struct exchange *x, const char *more, char *buf,
				   size_t cap)
{
	struct forward_scratch s;
	const struct rewrite_edit *e = x ? forward_response(x, &s) : NULL;
	size_t n = more ? strlen(more) : 0;
	if (!e || n >= cap)
		return more;
	memcpy(buf, more ? more : "", n);
	int k = rewrite_edit_fields(buf + n, 0, cap - n - 1, e);
	if (k < 0)
		return more;
	buf[n + (size_t)k] = 0;
	return buf;
}

const struct rewrite_edit *forward_response(const struct exchange *x, struct forward_scratch *s)
{
	const struct conf_fwd *rf = x->route ? x->route->fwd : NULL;
	const struct conf_fwd *pf = x->pool ? x->pool->conf->fwd : NULL;
	if ((!rf || !rf->resp.given) && (!pf || !pf->resp.given))
		return NULL;
	edit_begin(s);
	if (rf)
		edit_add(x, &rf->resp, s, 0, 0);
	if (pf)
		edit_add(x, &pf->resp, s, 0, s->edit.nset);
	return &s->edit;
}
