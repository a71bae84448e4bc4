/*
 * test_cache_rfc.c - the cache's RFC 9111 / 9110 decisions (cache/control.h, fresh.h,
 * cond.h, vary.h), table by table: Cache-Control as written and as attackers write it,
 * what may be stored and why not, lifetime and age, what a request may be given, stale on
 * error, HTTP-dates (checked against the C library over five centuries), 304s, ranges, and
 * Vary keys. Heads are parsed from literal text by the real parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <cmocka.h>

#include "cache/cond.h"
#include "cache/control.h"
#include "cache/fresh.h"
#include "cache/vary.h"

#define U CACHE_UNSET
#define BIG CACHE_DELTA_MAX
#define T0 784111777LL /* Sun, 06 Nov 1994 08:49:37 GMT */
#define D0 "Sun, 06 Nov 1994 08:49:37 GMT"

struct msg {
	char buf[16384];
	struct http_head h;
};

/* <fields>: header lines separated by '\n' (written out with CRLF). */
static size_t put_fields(char *b, size_t n, const char *fields)
{
	for (const char *p = fields; *p; p++) {
		if (*p == '\n')
			b[n++] = '\r';
		b[n++] = *p;
	}
	if (*fields) {
		b[n++] = '\r';
		b[n++] = '\n';
	}
	return n;
}

static const struct http_head *request(struct msg *m, const char *method, const char *fields)
{
	size_t n = (size_t)snprintf(m->buf, sizeof(m->buf), "%s / HTTP/1.1\r\nHost: a\r\n", method);
	n = put_fields(m->buf, n, fields);
	memcpy(m->buf + n, "\r\n", 2);
	int r = http_parse_request(m->buf, n + 2, sizeof(m->buf), &m->h);
	if (r <= 0)
		fail_msg("request did not parse (%d): %s", r, fields);
	return &m->h;
}

static const struct http_head *response(struct msg *m, int status, const char *fields)
{
	size_t n = (size_t)snprintf(m->buf, sizeof(m->buf), "HTTP/1.1 %d X\r\n", status);
	n = put_fields(m->buf, n, fields);
	memcpy(m->buf + n, "Content-Length: 0\r\n\r\n", 21);
	int r = http_parse_response(m->buf, n + 21, sizeof(m->buf), HTTP_GET, &m->h);
	if (r <= 0)
		fail_msg("response did not parse (%d): %s", r, fields);
	return &m->h;
}

static struct http_str str(const char *s)
{
	return (struct http_str){s, s ? (uint32_t)strlen(s) : 0};
}

/* --- Cache-Control ------------------------------------------------------------------ */

enum {
	NS = 1 << 0,
	NC = 1 << 1,
	PRIV = 1 << 2,
	PUB = 1 << 3,
	MR = 1 << 4,
	PR = 1 << 5,
	MU = 1 << 6,
	OIC = 1 << 7,
	NT = 1 << 8,
	IMM = 1 << 9,
	PRES = 1 << 10,
};

static unsigned flags_of(const struct cache_control *cc)
{
	return (cc->no_store ? NS : 0) | (cc->no_cache ? NC : 0) | (cc->private_ ? PRIV : 0) |
	       (cc->public_ ? PUB : 0) | (cc->must_revalidate ? MR : 0) |
	       (cc->proxy_revalidate ? PR : 0) | (cc->must_understand ? MU : 0) |
	       (cc->only_if_cached ? OIC : 0) | (cc->no_transform ? NT : 0) |
	       (cc->immutable ? IMM : 0) | (cc->present ? PRES : 0);
}

static void control_cases(void **state)
{
	(void)state;
	static const struct {
		int req;
		const char *fields;
		int64_t max_age, s_maxage, max_stale, min_fresh, swr, sie;
		unsigned flags;
	} cases[] = {
	    {0, "", U, U, U, U, U, U, 0},
	    {0, "Cache-Control: max-age=60", 60, U, U, U, U, U, PRES},
	    {0, "Cache-Control: MAX-AGE=60, Public", 60, U, U, U, U, U, PUB | PRES},
	    {0, "Cache-Control: max-age=\"60\"", 60, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=0", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=000000000000000000000000000042", 42, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=2147483647", 2147483647, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=2147483648", BIG, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=2147483649", BIG, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=99999999999999999999", BIG, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=99999999999999999999999999999999999999999999", BIG, U, U, U,
	     U, U, PRES},
	    /* malformed max-age in a response: stale at once */
	    {0, "Cache-Control: max-age=-1", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=1a", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age =5", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age= 5", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=1.5", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=+5", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=\"6\\0\"", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=\"60", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=\"\"", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=\xc3\xa9", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=5 junk, no-store", 0, U, U, U, U, U, NS | PRES},
	    {0, "Cache-Control: s-maxage=1x", U, 0, U, U, U, U, PRES},
	    /* the first counts */
	    {0, "Cache-Control: max-age=5, max-age=10", 5, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=x, max-age=10", 0, U, U, U, U, U, PRES},
	    {0, "Cache-Control: max-age=5\nCache-Control: max-age=10, no-store", 5, U, U, U, U, U,
	     NS | PRES},
	    {0, "Cache-Control: no-store\nCache-Control: max-age=5", 5, U, U, U, U, U, NS | PRES},
	    /* qualified forms, commas inside quotes */
	    {0, "Cache-Control: no-cache=\"Set-Cookie, X\", max-age=7", 7, U, U, U, U, U,
	     NC | PRES},
	    {0, "Cache-Control: private=\"a,b\", s-maxage=30", U, 30, U, U, U, U, PRIV | PRES},
	    {0, "Cache-Control: no-cache=Set-Cookie", U, U, U, U, U, U, NC | PRES},
	    {0, "Cache-Control: foo=\"a, max-age=1\", max-age=2", 2, U, U, U, U, U, PRES},
	    {0, "Cache-Control: \"max-age=1, x\", max-age=2", 2, U, U, U, U, U, PRES},
	    {0, "Cache-Control: foo=\"unterminated, max-age=1", U, U, U, U, U, U, PRES},
	    {0, "Cache-Control: \"x, max-age=1\", max-age=2", 2, U, U, U, U, U, PRES},
	    {0, "Cache-Control: junk \"a, no-store\", max-age=3", 3, U, U, U, U, U, PRES},
	    {0, "Cache-Control: foo=\"a\\\", max-age=1\", max-age=3", 3, U, U, U, U, U, PRES},
	    /* empty and junk elements */
	    {0, "Cache-Control: ,,, ,max-age=3,,", 3, U, U, U, U, U, PRES},
	    {0, "Cache-Control: =5, max-age=4", 4, U, U, U, U, U, PRES},
	    {0, "Cache-Control:", U, U, U, U, U, U, PRES},
	    {0, "Cache-Control: \xc3\xa9max-age=5, public", U, U, U, U, U, U, PUB | PRES},
	    {0, "Cache-Control: max-age=5\t,\tpublic", 5, U, U, U, U, U, PUB | PRES},
	    {0, "Cache-Control: MaX-AgE=5, NO-STORE", 5, U, U, U, U, U, NS | PRES},
	    {0, "Cache-Control: max-ages=5, xmax-age=6, max-age-=7", U, U, U, U, U, U, PRES},
	    /* permissive directives only bare; restrictive ones whatever follows */
	    {0, "Cache-Control: public=1", U, U, U, U, U, U, PRES},
	    {0, "Cache-Control: public junk", U, U, U, U, U, U, PRES},
	    {0, "Cache-Control: must-understand=\"x\", immutable=1", U, U, U, U, U, U, PRES},
	    {0, "Cache-Control: must-understand, no-store", U, U, U, U, U, U, MU | NS | PRES},
	    {0, "Cache-Control: no-store=1, must-revalidate x, proxy-revalidate=\"\"", U, U, U, U,
	     U, U, NS | MR | PR | PRES},
	    {0, "Cache-Control: immutable, no-transform", U, U, U, U, U, U, IMM | NT | PRES},
	    /* RFC 5861 */
	    {0, "Cache-Control: stale-while-revalidate=30, stale-if-error=abc", U, U, U, U, 30, 0,
	     PRES},
	    {0, "Cache-Control: stale-if-error=\"86400\"", U, U, U, U, U, 86400, PRES},
	    /* directives of the other side are not read */
	    {0, "Cache-Control: max-stale=5, min-fresh=6, only-if-cached", U, U, U, U, U, U,
	     OIC | PRES},
	    {1, "Cache-Control: s-maxage=10", U, U, U, U, U, U, PRES},
	    /* requests: malformed is ignored */
	    {1, "Cache-Control: max-age=x", U, U, U, U, U, U, PRES},
	    {1, "Cache-Control: max-age=x, max-age=5", 5, U, U, U, U, U, PRES},
	    {1, "Cache-Control: max-age=-1", U, U, U, U, U, U, PRES},
	    {1, "Cache-Control: max-stale", U, U, BIG, U, U, U, PRES},
	    {1, "Cache-Control: max-stale=10", U, U, 10, U, U, U, PRES},
	    {1, "Cache-Control: max-stale=", U, U, U, U, U, U, PRES},
	    {1, "Cache-Control: max-stale=1x", U, U, U, U, U, U, PRES},
	    {1, "Cache-Control: max-stale=99999999999999999999", U, U, BIG, U, U, U, PRES},
	    {1, "Cache-Control: min-fresh=5, stale-if-error=9", U, U, U, 5, U, 9, PRES},
	    {1, "Cache-Control: no-cache, only-if-cached", U, U, U, U, U, U, NC | OIC | PRES},
	    /* Pragma: only in a request without Cache-Control */
	    {1, "Pragma: no-cache", U, U, U, U, U, U, NC},
	    {1, "Pragma: x, No-Cache", U, U, U, U, U, U, NC},
	    {1, "Pragma: no-cache\nCache-Control: max-age=5", 5, U, U, U, U, U, PRES},
	    {1, "Pragma: no-cachex", U, U, U, U, U, U, 0},
	    {0, "Pragma: no-cache", U, U, U, U, U, U, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		struct cache_control cc;
		const struct http_head *h = cases[i].req ? request(&m, "GET", cases[i].fields)
							 : response(&m, 200, cases[i].fields);
		cache_control_parse(h, cases[i].req, &cc);
		int64_t got[6] = {cc.max_age,
				  cc.s_maxage,
				  cc.max_stale,
				  cc.min_fresh,
				  cc.stale_while_revalidate,
				  cc.stale_if_error};
		int64_t want[6] = {cases[i].max_age,   cases[i].s_maxage, cases[i].max_stale,
				   cases[i].min_fresh, cases[i].swr,	  cases[i].sie};
		for (int k = 0; k < 6; k++)
			if (got[k] != want[k])
				fail_msg("case %zu (%s): number %d is %lld, want %lld", i,
					 cases[i].fields, k, (long long)got[k], (long long)want[k]);
		if (flags_of(&cc) != cases[i].flags)
			fail_msg("case %zu (%s): flags %#x, want %#x", i, cases[i].fields,
				 flags_of(&cc), cases[i].flags);
	}
}

/* --- storability -------------------------------------------------------------------- */

static const struct cache_rules rules_none = {.stale_while_revalidate_s = U, .stale_if_error_s = U};
static const struct cache_rules rules_cookies = {
    .store_cookies = 1, .stale_while_revalidate_s = U, .stale_if_error_s = U};
static const struct cache_rules rules_auth = {
    .store_authorized = 1, .stale_while_revalidate_s = U, .stale_if_error_s = U};

static void storable_cases(void **state)
{
	(void)state;
	static const struct {
		const char *method, *req;
		int status;
		const char *resp;
		const struct cache_rules *rules;
		const char *why; /* NULL: stored */
	} cases[] = {
	    {"GET", "", 200, "Cache-Control: max-age=60", &rules_none, NULL},
	    {"HEAD", "", 200, "Cache-Control: max-age=60", &rules_none, "not GET"},
	    {"POST", "", 200, "Cache-Control: max-age=60", &rules_none, "not GET"},
	    {"DELETE", "", 200, "Cache-Control: max-age=60", &rules_none, "not GET"},
	    /* heuristically cacheable statuses need nothing more */
	    {"GET", "", 200, "", &rules_none, NULL},
	    {"GET", "", 203, "", &rules_none, NULL},
	    {"GET", "", 204, "", &rules_none, NULL},
	    {"GET", "", 300, "", &rules_none, NULL},
	    {"GET", "", 301, "", &rules_none, NULL},
	    {"GET", "", 308, "", &rules_none, NULL},
	    {"GET", "", 404, "", &rules_none, NULL},
	    {"GET", "", 405, "", &rules_none, NULL},
	    {"GET", "", 410, "", &rules_none, NULL},
	    {"GET", "", 414, "", &rules_none, NULL},
	    {"GET", "", 501, "", &rules_none, NULL},
	    /* understood, not heuristic: explicit freshness or public */
	    {"GET", "", 302, "", &rules_none, "no freshness"},
	    {"GET", "", 303, "", &rules_none, "no freshness"},
	    {"GET", "", 307, "", &rules_none, "no freshness"},
	    {"GET", "", 302, "Cache-Control: max-age=5", &rules_none, NULL},
	    {"GET", "", 307, "Cache-Control: public", &rules_none, NULL},
	    {"GET", "", 302, "Expires: " D0, &rules_none, NULL},
	    {"GET", "", 302, "ETag: \"x\"\nLast-Modified: " D0, &rules_none, "no freshness"},
	    /* other statuses: explicit freshness only */
	    {"GET", "", 500, "", &rules_none, "status 500"},
	    {"GET", "", 500, "Cache-Control: public", &rules_none, "status 500"},
	    {"GET", "", 500, "Cache-Control: max-age=10", &rules_none, NULL},
	    {"GET", "", 503, "Expires: " D0, &rules_none, NULL},
	    {"GET", "", 503, "Expires: 0", &rules_none, NULL}, /* stored, stale at once */
	    {"GET", "", 429, "Cache-Control: s-maxage=1", &rules_none, NULL},
	    {"GET", "", 403, "", &rules_none, "status 403"},
	    {"GET", "", 599, "", &rules_none, "status 599"},
	    /* never */
	    {"GET", "", 206, "Cache-Control: max-age=60", &rules_none, "status 206"},
	    {"GET", "", 206, "", &rules_none, "status 206"},
	    {"GET", "", 304, "Cache-Control: max-age=60", &rules_none, "status 304"},
	    /* no-store, must-understand */
	    {"GET", "", 200, "Cache-Control: no-store", &rules_none, "no-store"},
	    {"GET", "", 200, "Cache-Control: max-age=60, NO-STORE", &rules_none, "no-store"},
	    {"GET", "Cache-Control: no-store", 200, "Cache-Control: max-age=60", &rules_none,
	     "no-store"},
	    {"GET", "", 200, "Cache-Control: must-understand, no-store", &rules_none, NULL},
	    {"GET", "", 200, "Cache-Control: must-understand=1, no-store", &rules_none, "no-store"},
	    {"GET", "Cache-Control: no-store", 200, "Cache-Control: must-understand, no-store",
	     &rules_none, "no-store"},
	    {"GET", "", 500, "Cache-Control: must-understand, no-store, max-age=5", &rules_none,
	     "status 500"},
	    {"GET", "", 418, "Cache-Control: must-understand, max-age=5", &rules_none,
	     "status 418"},
	    {"GET", "", 302, "Cache-Control: must-understand, no-store, max-age=5", &rules_none,
	     NULL},
	    /* private */
	    {"GET", "", 200, "Cache-Control: private", &rules_none, "private"},
	    {"GET", "", 200, "Cache-Control: private=\"X-Secret\", public", &rules_none, "private"},
	    {"GET", "", 200, "Cache-Control: public\nCache-Control: private", &rules_none,
	     "private"},
	    /* Vary */
	    {"GET", "", 200, "Vary: *", &rules_none, "Vary: *"},
	    {"GET", "", 200, "Vary: Accept, *", &rules_none, "Vary: *"},
	    {"GET", "", 200, "Vary: accept\nVary: *", &rules_none, "Vary: *"},
	    {"GET", "", 200, "Vary: a b", &rules_none, "Vary: *"},
	    {"GET", "", 200, "Vary: \"accept\"", &rules_none, "Vary: *"},
	    {"GET", "", 200, "Vary: Accept-Encoding", &rules_none, NULL},
	    {"GET", "", 200, "Vary: *x", &rules_none, NULL}, /* a (strange) field-name */
	    /* Authorization (3.5) */
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: max-age=60", &rules_none,
	     "Authorization"},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: public", &rules_none,
	     "Authorization"},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: max-age=60", &rules_auth,
	     "Authorization"},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: public", &rules_auth, NULL},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: s-maxage=5", &rules_auth, NULL},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: must-revalidate", &rules_auth,
	     NULL},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: proxy-revalidate", &rules_auth,
	     "Authorization"},
	    {"GET", "Authorization: Bearer x", 200, "Cache-Control: public=1", &rules_auth,
	     "Authorization"},
	    {"GET", "authorization: Basic eA==", 200, "", &rules_none, "Authorization"},
	    /* Set-Cookie */
	    {"GET", "", 200, "Set-Cookie: a=b", &rules_none, "Set-Cookie"},
	    {"GET", "", 200, "Set-Cookie: a=b\nCache-Control: public, max-age=9", &rules_none,
	     "Set-Cookie"},
	    {"GET", "", 200, "Set-Cookie: a=b", &rules_cookies, NULL},
	    /* no-cache is storable (revalidated at each use) */
	    {"GET", "", 200, "Cache-Control: no-cache", &rules_none, NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg mq, ms;
		struct cache_control rq, rs;
		const struct http_head *req = request(&mq, cases[i].method, cases[i].req);
		const struct http_head *resp = response(&ms, cases[i].status, cases[i].resp);
		cache_control_parse(req, 1, &rq);
		cache_control_parse(resp, 0, &rs);
		const char *why = cache_storable(req, &rq, resp, &rs, cases[i].rules);
		if ((why == NULL) != (cases[i].why == NULL) ||
		    (why && strcmp(why, cases[i].why) != 0))
			fail_msg("case %zu (%d %s | %s): got %s, want %s", i, cases[i].status,
				 cases[i].resp, cases[i].req, why ? why : "stored",
				 cases[i].why ? cases[i].why : "stored");
	}
}

/* --- lifetime and age --------------------------------------------------------------- */

static void times_cases(void **state)
{
	(void)state;
	static const struct cache_rules h10 = {.heuristic_pct = 10,
					       .heuristic_max_s = 86400,
					       .stale_while_revalidate_s = U,
					       .stale_if_error_s = U};
	static const struct cache_rules h10cap = {.heuristic_pct = 10,
						  .heuristic_max_s = 50,
						  .stale_while_revalidate_s = U,
						  .stale_if_error_s = U};
	static const struct cache_rules h0 = {
	    .heuristic_max_s = 86400, .stale_while_revalidate_s = U, .stale_if_error_s = U};
	static const struct cache_rules hneg = {.heuristic_pct = 10,
						.heuristic_max_s = -1,
						.stale_while_revalidate_s = U,
						.stale_if_error_s = U};
	static const struct cache_rules hhuge = {.heuristic_pct = 4000000000u,
						 .heuristic_max_s = INT64_MAX,
						 .stale_while_revalidate_s = U,
						 .stale_if_error_s = U};
	static const struct cache_rules defaults = {.stale_while_revalidate_s = 60,
						    .stale_if_error_s = 600};
	static const struct {
		int status;
		const char *fields;
		int64_t req_time, resp_time;
		const struct cache_rules *rules;
		int64_t lifetime, age;
		unsigned mr, nc, heur;
		int64_t swr, sie;
	} cases[] = {
	    {200, "Date: " D0 "\nCache-Control: max-age=60", T0, T0, &rules_none, 60, 0, 0, 0, 0, U,
	     U},
	    {200, "Date: " D0 "\nCache-Control: max-age=60, s-maxage=30", T0, T0, &rules_none, 30,
	     0, 1, 0, 0, U, U},
	    {200, "Date: " D0 "\nExpires: Sun, 06 Nov 1994 08:51:17 GMT", T0, T0, &rules_none, 100,
	     0, 0, 0, 0, U, U},
	    /* no Date: the response time stands for it */
	    {200, "Expires: Sun, 06 Nov 1994 08:51:17 GMT", T0, T0, &rules_none, 100, 0, 0, 0, 0, U,
	     U},
	    {200, "Date: garbage\nExpires: Sun, 06 Nov 1994 08:51:17 GMT", T0, T0, &rules_none, 100,
	     0, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nExpires: 0", T0, T0, &rules_none, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nExpires: Sun, 06 Nov 1994 08:00:00 GMT", T0, T0, &rules_none, 0, 0,
	     0, 0, 0, U, U},
	    {200, "Date: " D0 "\nExpires: " D0 "\nExpires: Sun, 06 Nov 1994 08:51:17 GMT", T0, T0,
	     &rules_none, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nExpires: Fri, 31 Dec 9999 23:59:59 GMT", T0, T0, &rules_none, BIG,
	     0, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nExpires: 0\nCache-Control: max-age=5", T0, T0, &rules_none, 5, 0,
	     0, 0, 0, U, U},
	    {200, "Date: " D0 "\nCache-Control: max-age=x", T0, T0, &rules_none, 0, 0, 0, 0, 0, U,
	     U},
	    /* heuristic: 10% of Date - Last-Modified (1000 s) */
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 08:32:57 GMT", T0, T0, &h10, 100,
	     0, 0, 0, 1, U, U},
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 08:32:57 GMT", T0, T0, &h10cap, 50,
	     0, 0, 0, 1, U, U},
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 08:32:57 GMT", T0, T0, &h0, 0, 0,
	     0, 0, 0, U, U},
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 08:32:57 GMT", T0, T0, &hneg, 0, 0,
	     0, 0, 0, U, U},
	    {200, "Date: " D0 "\nLast-Modified: Thu, 01 Jan 1970 00:00:00 GMT", T0, T0, &hhuge, BIG,
	     0, 0, 0, 1, U, U},
	    {302, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 08:32:57 GMT", T0, T0, &h10, 0, 0,
	     0, 0, 0, U, U},
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 09:00:00 GMT", T0, T0, &h10, 0, 0,
	     0, 0, 0, U, U},
	    {200, "Date: " D0 "\nLast-Modified: yesterday", T0, T0, &h10, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 08:32:57 GMT\nExpires: 0", T0, T0,
	     &h10, 0, 0, 0, 0, 0, U, U},
	    /* age: corrected_initial_age = max(apparent_age, Age + response_delay) */
	    {200, "Date: " D0 "\nAge: 10", T0 - 2, T0, &rules_none, 0, 12, 0, 0, 0, U, U},
	    {200, "Date: Sun, 06 Nov 1994 08:49:07 GMT\nAge: 5", T0, T0, &rules_none, 0, 30, 0, 0,
	     0, U, U},
	    {200, "Date: " D0 "\nAge: 99999999999999999999", T0, T0, &rules_none, 0, BIG, 0, 0, 0,
	     U, U},
	    {200, "Date: " D0 "\nAge: -5", T0, T0, &rules_none, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nAge: 5, 6", T0, T0, &rules_none, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: Sun, 06 Nov 1994 09:49:37 GMT", T0, T0, &rules_none, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: " D0, T0 + 50, T0, &rules_none, 0, 0, 0, 0, 0, U, U},
	    {200, "Date: Thu, 01 Jan 1970 00:00:00 GMT", T0, T0, &rules_none, 0, T0, 0, 0, 0, U, U},
	    {200, "Date: " D0, INT64_MIN, INT64_MAX, &rules_none, 0, BIG, 0, 0, 0, U, U},
	    {200, "Date: " D0 "\nAge: 7", INT64_MAX, INT64_MIN, &rules_none, 0, 7, 0, 0, 0, U, U},
	    /* revalidation flags */
	    {200, "Cache-Control: must-revalidate", T0, T0, &rules_none, 0, 0, 1, 0, 0, U, U},
	    {200, "Cache-Control: proxy-revalidate", T0, T0, &rules_none, 0, 0, 1, 0, 0, U, U},
	    {200, "Cache-Control: s-maxage=0", T0, T0, &rules_none, 0, 0, 1, 0, 0, U, U},
	    {200, "Cache-Control: no-cache, max-age=9", T0, T0, &rules_none, 9, 0, 0, 1, 0, U, U},
	    /* RFC 5861, or the route's defaults */
	    {200, "Cache-Control: stale-while-revalidate=30, stale-if-error=40", T0, T0,
	     &rules_none, 0, 0, 0, 0, 0, 30, 40},
	    {200, "", T0, T0, &defaults, 0, 0, 0, 0, 0, 60, 600},
	    {200, "Cache-Control: stale-while-revalidate=1", T0, T0, &defaults, 0, 0, 0, 0, 0, 1,
	     600},
	    {200, "Cache-Control: stale-if-error=bad", T0, T0, &defaults, 0, 0, 0, 0, 0, 60, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		struct cache_control rs;
		struct cache_times t;
		const struct http_head *h = response(&m, cases[i].status, cases[i].fields);
		cache_control_parse(h, 0, &rs);
		cache_times_compute(h, &rs, cases[i].req_time, cases[i].resp_time, cases[i].rules,
				    &t);
		if (t.lifetime != cases[i].lifetime || t.corrected_initial_age != cases[i].age ||
		    t.must_revalidate != cases[i].mr || t.no_cache != cases[i].nc ||
		    t.heuristic != cases[i].heur || t.stale_while_revalidate != cases[i].swr ||
		    t.stale_if_error != cases[i].sie || t.response_time != cases[i].resp_time)
			fail_msg(
			    "case %zu (%s): lifetime %lld age %lld mr %u nc %u heur %u swr %lld "
			    "sie %lld",
			    i, cases[i].fields, (long long)t.lifetime,
			    (long long)t.corrected_initial_age, t.must_revalidate, t.no_cache,
			    t.heuristic, (long long)t.stale_while_revalidate,
			    (long long)t.stale_if_error);
	}
}

static void current_age(void **state)
{
	(void)state;
	struct cache_times t = {.response_time = T0, .corrected_initial_age = 10};
	assert_int_equal(cache_current_age(&t, T0), 10);
	assert_int_equal(cache_current_age(&t, T0 + 5), 15);
	assert_int_equal(cache_current_age(&t, T0 - 100), 10); /* the clock went back */
	assert_int_equal(cache_current_age(&t, INT64_MAX), BIG);
	assert_int_equal(cache_current_age(&t, INT64_MIN), 10);
	t.corrected_initial_age = BIG;
	assert_int_equal(cache_current_age(&t, T0 + 1000), BIG);
	t.corrected_initial_age = INT64_MAX; /* never made by compute, still no overflow */
	assert_int_equal(cache_current_age(&t, T0 + 1000), BIG);
}

/* --- what a request may be given ---------------------------------------------------- */

static void decide_cases(void **state)
{
	(void)state;
	static const struct {
		int64_t lifetime, age;
		unsigned nc, mr;
		int64_t swr;
		const char *req;
		enum cache_use want;
	} cases[] = {
	    {100, 10, 0, 0, U, "", CACHE_USE_FRESH},
	    {100, 99, 0, 0, U, "", CACHE_USE_FRESH},
	    {100, 100, 0, 0, U, "", CACHE_USE_REVALIDATE},
	    {0, 0, 0, 0, U, "", CACHE_USE_REVALIDATE},
	    {BIG, BIG - 1, 0, 0, U, "", CACHE_USE_FRESH},
	    /* no-cache */
	    {100, 10, 0, 0, U, "Cache-Control: no-cache", CACHE_USE_REVALIDATE},
	    {100, 10, 0, 0, U, "Pragma: no-cache", CACHE_USE_REVALIDATE},
	    {100, 10, 1, 0, U, "", CACHE_USE_REVALIDATE},
	    {100, 10, 1, 0, 1000, "Cache-Control: max-stale", CACHE_USE_REVALIDATE},
	    /* request max-age, min-fresh */
	    {100, 10, 0, 0, U, "Cache-Control: max-age=5", CACHE_USE_REVALIDATE},
	    {100, 10, 0, 0, U, "Cache-Control: max-age=10", CACHE_USE_FRESH},
	    {100, 0, 0, 0, U, "Cache-Control: max-age=0", CACHE_USE_FRESH},
	    {100, 1, 0, 0, U, "Cache-Control: max-age=0", CACHE_USE_REVALIDATE},
	    {100, 10, 0, 0, U, "Cache-Control: max-age=bad", CACHE_USE_FRESH},
	    {100, 60, 0, 0, U, "Cache-Control: min-fresh=50", CACHE_USE_REVALIDATE},
	    {100, 50, 0, 0, U, "Cache-Control: min-fresh=50", CACHE_USE_FRESH},
	    {100, 10, 0, 0, U, "Cache-Control: min-fresh=99999999999999", CACHE_USE_REVALIDATE},
	    /* stale: max-stale */
	    {100, 110, 0, 0, U, "Cache-Control: max-stale", CACHE_USE_STALE},
	    {100, 110, 0, 0, U, "Cache-Control: max-stale=10", CACHE_USE_STALE},
	    {100, 110, 0, 0, U, "Cache-Control: max-stale=9", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 1, U, "Cache-Control: max-stale", CACHE_USE_REVALIDATE},
	    {0, 0, 0, 0, U, "Cache-Control: max-stale=0", CACHE_USE_STALE},
	    {100, 110, 0, 0, U, "Cache-Control: max-age=1000, max-stale", CACHE_USE_STALE},
	    {100, 110, 0, 0, U, "Cache-Control: max-age=100, max-stale", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 0, U, "Cache-Control: min-fresh=1, max-stale", CACHE_USE_REVALIDATE},
	    /* stale-while-revalidate */
	    {100, 110, 0, 0, 20, "", CACHE_USE_SWR},
	    {100, 120, 0, 0, 20, "", CACHE_USE_SWR},
	    {100, 121, 0, 0, 20, "", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 1, 20, "", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 0, 20, "Cache-Control: max-age=1000", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 0, 20, "Cache-Control: min-fresh=0", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 0, 20, "Cache-Control: max-stale=5", CACHE_USE_SWR},
	    {100, 110, 0, 0, 20, "Cache-Control: max-stale=50", CACHE_USE_STALE},
	    {100, 100, 0, 0, 0, "", CACHE_USE_SWR},
	    {100, 101, 0, 0, 0, "", CACHE_USE_REVALIDATE},
	    {100, 110, 0, 0, -7, "", CACHE_USE_REVALIDATE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		struct cache_control rq;
		cache_control_parse(request(&m, "GET", cases[i].req), 1, &rq);
		struct cache_times t = {.response_time = T0,
					.corrected_initial_age = cases[i].age,
					.lifetime = cases[i].lifetime,
					.stale_while_revalidate = cases[i].swr,
					.stale_if_error = U,
					.no_cache = cases[i].nc,
					.must_revalidate = cases[i].mr};
		enum cache_use got = cache_decide_use(&t, &rq, T0);
		if (got != cases[i].want)
			fail_msg("case %zu (lifetime %lld age %lld, %s): %d, want %d", i,
				 (long long)cases[i].lifetime, (long long)cases[i].age,
				 cases[i].req, got, cases[i].want);
		/* resident time counts like initial age */
		t.corrected_initial_age = 0;
		if (cases[i].age < BIG && cache_decide_use(&t, &rq, T0 + cases[i].age) != got)
			fail_msg("case %zu: resident time read differently", i);
	}
}

static void stale_if_error_cases(void **state)
{
	(void)state;
	static const struct {
		int64_t lifetime, age;
		unsigned nc, mr;
		int64_t sie;
		const char *req;
		int want;
	} cases[] = {
	    {100, 130, 0, 0, 60, "", 1},
	    {100, 160, 0, 0, 60, "", 1},
	    {100, 161, 0, 0, 60, "", 0},
	    {100, 130, 0, 1, 60, "", 0},
	    {100, 130, 1, 0, 60, "", 0},
	    {100, 130, 0, 0, U, "", 0},
	    {100, 130, 0, 0, U, "Cache-Control: stale-if-error=100", 1},
	    {100, 130, 0, 0, U, "Cache-Control: stale-if-error=29", 0},
	    {100, 130, 0, 0, 10, "Cache-Control: stale-if-error=100", 1},
	    {100, 130, 0, 0, 100, "Cache-Control: stale-if-error=10", 1},
	    {100, 130, 0, 1, U, "Cache-Control: stale-if-error=100", 0},
	    {100, 50, 0, 0, U, "", 0},
	    {100, 50, 0, 0, 0, "", 1},
	    {100, BIG, 0, 0, BIG, "", 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		struct cache_control rq;
		cache_control_parse(request(&m, "GET", cases[i].req), 1, &rq);
		struct cache_times t = {.response_time = T0,
					.corrected_initial_age = cases[i].age,
					.lifetime = cases[i].lifetime,
					.stale_while_revalidate = U,
					.stale_if_error = cases[i].sie,
					.no_cache = cases[i].nc,
					.must_revalidate = cases[i].mr};
		if (cache_stale_if_error_ok(&t, &rq, T0) != cases[i].want)
			fail_msg("case %zu: want %d", i, cases[i].want);
	}
}

/* --- HTTP-date ---------------------------------------------------------------------- */

static void date_cases(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		int64_t want; /* -1: refused */
	} cases[] = {
	    {D0, T0},
	    {"Sunday, 06-Nov-94 08:49:37 GMT", T0},
	    {"Sun Nov  6 08:49:37 1994", T0},
	    {"Sun Nov 06 08:49:37 1994", T0},
	    {"Mon, 06 Nov 1994 08:49:37 GMT", T0}, /* the day name is not checked */
	    {"Thu, 01 Jan 1970 00:00:00 GMT", 0},
	    {"Fri, 31 Dec 9999 23:59:59 GMT", 253402300799LL},
	    {"Fri, 31 Dec 9999 23:59:60 GMT", 253402300799LL},
	    {"Tue, 29 Feb 2000 00:00:00 GMT", 951782400LL},
	    {"Thu, 29 Feb 2024 12:00:00 GMT", 1709208000LL},
	    {"Sun, 06 Nov 1994 08:49:60 GMT", T0 + 23},
	    {"Tue, 19 Jan 2038 03:14:08 GMT", 2147483648LL},
	    {"Wed, 29 Feb 2023 00:00:00 GMT", -1},
	    {"Mon, 29 Feb 2100 00:00:00 GMT", -1},
	    {"Sun, 06 Nov 1994 24:00:00 GMT", -1},
	    {"Sun, 06 Nov 1994 08:60:00 GMT", -1},
	    {"Sun, 06 Nov 1994 08:49:61 GMT", -1},
	    {"Sun, 32 Oct 1994 08:49:37 GMT", -1},
	    {"Sun, 31 Nov 1994 08:49:37 GMT", -1},
	    {"Sun, 00 Nov 1994 08:49:37 GMT", -1},
	    {"Sun, 06 Nov 1969 08:49:37 GMT", -1},
	    {"Sun, 06 Nov 0000 08:49:37 GMT", -1},
	    {"sun, 06 Nov 1994 08:49:37 GMT", -1},
	    {"Sun, 06 nov 1994 08:49:37 GMT", -1},
	    {"Sun, 06 Nov 1994 08:49:37 gmt", -1},
	    {"Sun, 06 Nov 1994 08:49:37 UTC", -1},
	    {"Sun, 06 Nov 1994 08:49:37 GMT ", -1},
	    {" Sun, 06 Nov 1994 08:49:37 GMT", -1},
	    {"Sun, 6 Nov 1994 08:49:37 GMT", -1},
	    {"Sun, 06 Nov +994 08:49:37 GMT", -1},
	    {"Sun, 06 Nov 1994 08:49:3  GMT", -1},
	    {"Sun, 06 Nov 1994 08-49-37 GMT", -1},
	    {"Sun, 06 Xyz 1994 08:49:37 GMT", -1},
	    {"Sun,_06 Nov 1994 08:49:37 GMT", -1},
	    {"Xyz, 06 Nov 1994 08:49:37 GMT", -1},
	    {"Sunday, 06-Nov-1994 08:49:37 GMT", -1},
	    {"Sunday, 06-Nov-94 08:49:37 UTC", -1},
	    {"Sonday, 06-Nov-94 08:49:37 GMT", -1},
	    {"Sunday 06-Nov-94 08:49:37 GMT ", -1},
	    {"Sun Nov  6 08:49:37 94", -1},
	    {"Sun Nov 6  08:49:37 1994", -1},
	    {"Sun Nov  6 08:49:37 1994 ", -1},
	    {"", -1},
	    {"0", -1},
	    {"-1", -1},
	    {"1994-11-06T08:49:37Z", -1},
	    {"\xff\xff\xff, 06 Nov 1994 08:49:37 GMT", -1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t t = 12345;
		int rc = cache_parse_http_date(str(cases[i].s), &t);
		if (cases[i].want < 0 ? rc != -1 : (rc != 0 || t != cases[i].want))
			fail_msg("case %zu (%s): rc %d t %lld", i, cases[i].s, rc, (long long)t);
	}
	int64_t t;
	assert_int_equal(cache_parse_http_date((struct http_str){NULL, 0}, &t), -1);
	char nul[] = D0;
	nul[10] = 0;
	assert_int_equal(cache_parse_http_date((struct http_str){nul, 29}, &t), -1);
}

/* RFC 850's year: within 50 years of today, whichever today is. */
static void date_two_digit_year(void **state)
{
	(void)state;
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	int cur = tm.tm_year + 1900;
	static const char *const days[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
					   "Thursday", "Friday", "Saturday"};
	for (int ahead = -49; ahead <= 50; ahead++) {
		int y = cur + ahead;
		struct tm want = {.tm_year = y - 1900, .tm_mon = 0, .tm_mday = 2};
		time_t w = timegm(&want);
		char s[64];
		snprintf(s, sizeof(s), "%s, 02-Jan-%02d 00:00:00 GMT", days[(w / 86400 + 4) % 7],
			 y % 100);
		int64_t got;
		assert_int_equal(cache_parse_http_date(str(s), &got), 0);
		if (got != (int64_t)w)
			fail_msg("%s: %lld, want %lld (year %d)", s, (long long)got, (long long)w,
				 y);
	}
}

/* Our format against the C library's, one instant in every day of five centuries, and back. */
static void date_format_round_trip(void **state)
{
	(void)state;
	char ours[30], libc[64];
	int64_t back;
	for (int64_t t = 0; t <= 253402300799LL; t += 86400 * 3 + 3607) {
		if (t > 16000000000LL && t < 250000000000LL)
			t = 250000000000LL; /* the two ends, not all between */
		cache_format_http_date(t, ours);
		time_t tt = (time_t)t;
		struct tm tm;
		gmtime_r(&tt, &tm);
		strftime(libc, sizeof(libc), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		if (strcmp(ours, libc) != 0)
			fail_msg("%lld: %s, libc %s", (long long)t, ours, libc);
		if (cache_parse_http_date(str(ours), &back) != 0 || back != t)
			fail_msg("%s read back as %lld", ours, (long long)back);
	}
	cache_format_http_date(T0, ours);
	assert_string_equal(ours, D0);
	cache_format_http_date(-5, ours);
	assert_string_equal(ours, "Thu, 01 Jan 1970 00:00:00 GMT");
	cache_format_http_date(INT64_MIN, ours);
	assert_string_equal(ours, "Thu, 01 Jan 1970 00:00:00 GMT");
	cache_format_http_date(INT64_MAX, ours);
	assert_string_equal(ours, "Fri, 31 Dec 9999 23:59:59 GMT");
	cache_format_http_date(951782400LL, ours);
	assert_string_equal(ours, "Tue, 29 Feb 2000 00:00:00 GMT");
}

/* --- conditional requests ----------------------------------------------------------- */

#define ET "\"abc\""

static void not_modified_cases(void **state)
{
	(void)state;
	static const struct {
		const char *method, *fields, *etag, *lm;
		int want;
	} cases[] = {
	    {"GET", "", ET, D0, 0},
	    {"GET", "If-None-Match: \"abc\"", ET, D0, 1},
	    {"HEAD", "If-None-Match: \"abc\"", ET, D0, 1},
	    {"POST", "If-None-Match: \"abc\"", ET, D0, 0},
	    {"PUT", "If-None-Match: *", ET, D0, 0},
	    {"GET", "If-None-Match: W/\"abc\"", ET, D0, 1},
	    {"GET", "If-None-Match: \"abc\"", "W/\"abc\"", D0, 1},
	    {"GET", "If-None-Match: W/\"abc\"", "W/\"abc\"", D0, 1},
	    {"GET", "If-None-Match: \"xyz\"", ET, D0, 0},
	    {"GET", "If-None-Match: \"ABC\"", ET, D0, 0},
	    {"GET", "If-None-Match: \"xyz\", \"abc\"", ET, D0, 1},
	    {"GET", "If-None-Match: \"xyz\",W/\"abc\"", ET, D0, 1},
	    {"GET", "If-None-Match: , ,\"abc\",", ET, D0, 1},
	    {"GET", "If-None-Match: \"x\"\nIf-None-Match: \"abc\"", ET, D0, 1},
	    {"GET", "If-None-Match: \"a,b\"", "\"a,b\"", D0, 1},
	    {"GET", "If-None-Match: \"a,b\", \"c\"", "\"c\"", D0, 1},
	    {"GET", "If-None-Match: \"a\", \"b", "\"b\"", D0, 0},
	    {"GET", "If-None-Match: \"a\", \"b", "\"a\"", D0, 0},
	    {"GET", "If-None-Match: *", ET, D0, 1},
	    {"GET", "If-None-Match: *", NULL, NULL, 1},
	    {"GET", "If-None-Match: abc", "abc", D0, 0},
	    {"GET", "If-None-Match: w/\"abc\"", ET, D0, 0},
	    {"GET", "If-None-Match: \"abc\" \"def\"", ET, D0, 0},
	    {"GET", "If-None-Match: \"abc\"x", ET, D0, 0},
	    {"GET", "If-None-Match: *abc", ET, D0, 0},
	    {"GET", "If-None-Match: \"a c\"", "\"a c\"", D0, 0},
	    {"GET", "If-None-Match: \"abc\"", NULL, D0, 0},
	    {"GET", "If-None-Match: \"abc\"", "abc", D0, 0},
	    {"GET", "If-None-Match: \"abc\"", "\"abc\" ", D0, 0},
	    {"GET", "If-None-Match: \"\"", "\"\"", D0, 1},
	    {"GET", "If-None-Match: \"\xc3\xa9\"", "\"\xc3\xa9\"", D0, 1},
	    /* If-None-Match present: If-Modified-Since is not looked at */
	    {"GET", "If-None-Match: \"xyz\"\nIf-Modified-Since: " D0, ET, D0, 0},
	    {"GET", "If-None-Match:\nIf-Modified-Since: " D0, ET, D0, 0},
	    /* If-Modified-Since */
	    {"GET", "If-Modified-Since: " D0, ET, D0, 1},
	    {"HEAD", "If-Modified-Since: " D0, ET, D0, 1},
	    {"POST", "If-Modified-Since: " D0, ET, D0, 0},
	    {"GET", "If-Modified-Since: Sun, 06 Nov 1994 08:49:38 GMT", ET, D0, 1},
	    {"GET", "If-Modified-Since: Sun, 06 Nov 1994 08:49:36 GMT", ET, D0, 0},
	    {"GET", "If-Modified-Since: Sunday, 06-Nov-94 08:49:37 GMT", ET, D0, 1},
	    {"GET", "If-Modified-Since: garbage", ET, D0, 0},
	    {"GET", "If-Modified-Since: " D0, ET, NULL, 0},
	    {"GET", "If-Modified-Since: " D0, ET, "garbage", 0},
	    {"GET", "If-Modified-Since: " D0 "\nIf-Modified-Since: " D0, ET, D0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		const struct http_head *req = request(&m, cases[i].method, cases[i].fields);
		int got = cache_cond_not_modified(req, str(cases[i].etag), str(cases[i].lm));
		if (got != cases[i].want)
			fail_msg("case %zu (%s %s | etag %s): %d", i, cases[i].method,
				 cases[i].fields, cases[i].etag ? cases[i].etag : "none", got);
	}
}

static void range_cases(void **state)
{
	(void)state;
#define F CACHE_RANGE_FULL
#define P CACHE_RANGE_PART
#define X CACHE_RANGE_UNSATISFIABLE
	static const struct {
		const char *method, *fields;
		uint64_t total;
		const char *etag, *lm;
		enum cache_range want;
		uint64_t first, last;
	} cases[] = {
	    {"GET", "", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-99", 1000, ET, D0, P, 0, 99},
	    {"GET", "Range: bytes=0-", 1000, ET, D0, P, 0, 999},
	    {"GET", "Range: bytes=500-", 1000, ET, D0, P, 500, 999},
	    {"GET", "Range: bytes=-100", 1000, ET, D0, P, 900, 999},
	    {"GET", "Range: bytes=-1000", 1000, ET, D0, P, 0, 999},
	    {"GET", "Range: bytes=-2000", 1000, ET, D0, P, 0, 999},
	    {"GET", "Range: bytes=-1", 1000, ET, D0, P, 999, 999},
	    {"GET", "Range: bytes=-0", 1000, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=999-", 1000, ET, D0, P, 999, 999},
	    {"GET", "Range: bytes=999-999", 1000, ET, D0, P, 999, 999},
	    {"GET", "Range: bytes=1000-", 1000, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=1000-2000", 1000, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=0-5000", 1000, ET, D0, P, 0, 999},
	    {"GET", "Range: bytes=5-5", 1000, ET, D0, P, 5, 5},
	    {"GET", "Range: bytes=5-4", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=2000-1000", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1,5-6", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1, 0-1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1, ", 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: bytes=,0-1", 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: bytes= 0-1", 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: BYTES=0-1", 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: items=0-1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes 0-1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=-", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=--1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=a-b", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=1-2x", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0 -1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0- 1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=+1-2", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=1", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=\xc3\xa9", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nRange: bytes=0-1", 1000, ET, D0, F, 0, 0},
	    {"HEAD", "Range: bytes=0-1", 1000, ET, D0, F, 0, 0},
	    {"POST", "Range: bytes=0-1", 1000, ET, D0, F, 0, 0},
	    /* 64-bit edges */
	    {"GET", "Range: bytes=18446744073709551615-", 1000, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=18446744073709551616-", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-99999999999999999999", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-18446744073709551615", 1000, ET, D0, P, 0, 999},
	    {"GET", "Range: bytes=-99999999999999999999", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=-18446744073709551615", 1000, ET, D0, P, 0, 999},
	    {"GET", "Range: bytes=0-", UINT64_MAX, ET, D0, P, 0, UINT64_MAX - 1},
	    {"GET", "Range: bytes=-1", UINT64_MAX, ET, D0, P, UINT64_MAX - 1, UINT64_MAX - 1},
	    {"GET", "Range: bytes=18446744073709551614-18446744073709551615", UINT64_MAX, ET, D0, P,
	     UINT64_MAX - 1, UINT64_MAX - 1},
	    /* an empty body */
	    {"GET", "Range: bytes=0-", 0, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=0-0", 0, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=-5", 0, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=-0", 0, ET, D0, X, 0, 0},
	    {"GET", "Range: bytes=0-0", 1, ET, D0, P, 0, 0},
	    /* If-Range */
	    {"GET", "Range: bytes=0-1\nIf-Range: \"abc\"", 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: bytes=0-1\nIf-Range: \"xyz\"", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: W/\"abc\"", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: \"abc\"", 1000, "W/\"abc\"", D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: \"abc\"", 1000, NULL, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: \"abc\" ", 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: bytes=0-1\nIf-Range: \"abc\"x", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: " D0, 1000, ET, D0, P, 0, 1},
	    {"GET", "Range: bytes=0-1\nIf-Range: Sun, 06 Nov 1994 08:49:38 GMT", 1000, ET, D0, F, 0,
	     0},
	    {"GET", "Range: bytes=0-1\nIf-Range: " D0, 1000, ET, NULL, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: garbage", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range:", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=0-1\nIf-Range: \"abc\"\nIf-Range: \"abc\"", 1000, ET, D0, F, 0,
	     0},
	    {"GET", "Range: bytes=5000-\nIf-Range: \"xyz\"", 1000, ET, D0, F, 0, 0},
	    {"GET", "Range: bytes=5000-\nIf-Range: \"abc\"", 1000, ET, D0, X, 0, 0},
	    {"GET", "If-Range: \"abc\"", 1000, ET, D0, F, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		const struct http_head *req = request(&m, cases[i].method, cases[i].fields);
		uint64_t first = 77, last = 77;
		enum cache_range got = cache_range_of(req, cases[i].total, str(cases[i].etag),
						      str(cases[i].lm), &first, &last);
		if (got != cases[i].want ||
		    (got == CACHE_RANGE_PART && (first != cases[i].first || last != cases[i].last)))
			fail_msg("case %zu (%s %s, total %llu): %d %llu-%llu", i, cases[i].method,
				 cases[i].fields, (unsigned long long)cases[i].total, got,
				 (unsigned long long)first, (unsigned long long)last);
	}
}

#undef F
#undef P
#undef X

/* --- Vary --------------------------------------------------------------------------- */

static void vary_name_cases(void **state)
{
	(void)state;
	static const struct {
		const char *fields;
		size_t cap;
		int rc;
		const char *want;
	} cases[] = {
	    {"", 64, 0, ""},
	    {"Vary: Accept-Encoding", 64, 0, "accept-encoding\n"},
	    {"Vary: Accept-Encoding, accept-encoding", 64, 0, "accept-encoding\n"},
	    {"Vary: Accept-Language, Accept-Encoding", 64, 0, "accept-encoding\naccept-language\n"},
	    {"Vary: Accept-Encoding, Accept-Language", 64, 0, "accept-encoding\naccept-language\n"},
	    {"Vary: Accept-Language\nvary: ACCEPT-ENCODING", 64, 0,
	     "accept-encoding\naccept-language\n"},
	    {"Vary: ab, a, abc, b, A, AB", 64, 0, "a\nab\nabc\nb\n"},
	    {"Vary: ,, a ,,\t", 64, 0, "a\n"},
	    {"Vary:", 64, 0, ""},
	    {"Vary: *", 64, 1, ""},
	    {"Vary: a, *", 64, 1, ""},
	    {"Vary: *, a", 64, 1, ""},
	    {"Vary: a\nVary: *", 64, 1, ""},
	    {"Vary: a b", 64, 1, ""},
	    {"Vary: \"a\"", 64, 1, ""},
	    {"Vary: a;b", 64, 1, ""},
	    {"Vary: \xc3\xa9", 64, 1, ""},
	    {"Vary: abcdef", 5, -ENOSPC, ""},
	    {"Vary: abcd", 5, 0, "abcd\n"},
	    {"Vary: abcd, abcd, ABCD", 5, 0, "abcd\n"},
	    {"Vary: abcd, e", 5, -ENOSPC, ""},
	    {"Vary: abcdefghij, *", 4, 1, ""},
	    {"Vary: a", 0, -ENOSPC, ""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		char out[64];
		size_t len = 99;
		int rc =
		    cache_vary_names(response(&m, 200, cases[i].fields), out, cases[i].cap, &len);
		if (rc != cases[i].rc || (rc == 0 && (len != strlen(cases[i].want) ||
						      memcmp(out, cases[i].want, len) != 0)))
			fail_msg("case %zu (%s): rc %d, %.*s", i, cases[i].fields, rc,
				 rc == 0 ? (int)len : 0, out);
		if (rc != 0 && len != 0)
			fail_msg("case %zu: len %zu after an error", i, len);
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Many names in a scrambled order come out sorted and unique. */
static void vary_many_names(void **state)
{
	(void)state;
	static struct msg m;
	static char fields[12000], out[8192], names[700][8];
	char *sorted[700];
	size_t n = (size_t)snprintf(fields, sizeof(fields), "Vary: ");
	for (int i = 0; i < 700; i++) {
		snprintf(names[i], sizeof(names[i]), "n%d", (i * 379) % 700);
		sorted[i] = names[i];
		n += (size_t)snprintf(fields + n, sizeof(fields) - n, "%s%s", i ? ", " : "",
				      names[i]);
		if (i % 7 == 0) /* and some twice, upper case */
			n += (size_t)snprintf(fields + n, sizeof(fields) - n, ", N%d",
					      (i * 379) % 700);
	}
	qsort(sorted, 700, sizeof(sorted[0]), cmp_str);
	size_t len;
	assert_int_equal(cache_vary_names(response(&m, 200, fields), out, sizeof(out), &len), 0);
	size_t at = 0;
	for (int i = 0; i < 700; i++) {
		size_t l = strlen(sorted[i]);
		assert_true(at + l + 1 <= len);
		assert_memory_equal(out + at, sorted[i], l);
		assert_int_equal(out[at + l], '\n');
		at += l + 1;
	}
	assert_int_equal(at, len);
}

static void vary_value_cases(void **state)
{
	(void)state;
	static const struct {
		const char *fields, *names;
		size_t cap;
		int rc;
		const char *want;
	} cases[] = {
	    {"Accept-Encoding: gzip, br", "accept-encoding\n", 64, 0, "\2gzip, br\n"},
	    {"Accept-Encoding: gzip,br", "accept-encoding\n", 64, 0, "\2gzip, br\n"},
	    {"Accept-Encoding: gzip \t,   br", "accept-encoding\n", 64, 0, "\2gzip, br\n"},
	    {"Accept-Encoding: gzip\naccept-encoding: br", "accept-encoding\n", 64, 0,
	     "\2gzip, br\n"},
	    {"", "accept-encoding\n", 64, 0, "\1\n"},
	    {"Accept-Encoding:", "accept-encoding\n", 64, 0, "\2\n"},
	    {"Accept-Encoding: a b", "accept-encoding\n", 64, 0, "\2a b\n"},
	    {"Accept-Encoding: a  b", "accept-encoding\n", 64, 0, "\2a  b\n"},
	    {"X: a=\"x , y\", b", "x\n", 64, 0, "\2a=\"x , y\", b\n"},
	    {"X: a=\"x, y\" , b", "x\n", 64, 0, "\2a=\"x, y\", b\n"},
	    {"X: \"a\\\", b\" ,c", "x\n", 64, 0, "\2\"a\\\", b\", c\n"},
	    {"X: \"open , x", "x\n", 64, 0, "\2\"open , x\n"},
	    {"X: a,,b", "x\n", 64, 0, "\2a, , b\n"},
	    {"X: a, ,b", "x\n", 64, 0, "\2a, , b\n"},
	    {"X: a,", "x\n", 64, 0, "\2a, \n"},
	    {"X: a\nX:", "x\n", 64, 0, "\2a, \n"},
	    {"ACCEPT: text/html\nAccept-Language: en", "accept\naccept-encoding\naccept-language\n",
	     64, 0, "\2text/html\n\1\n\2en\n"},
	    {"X: \xc3\xa9", "x\n", 64, 0, "\2\xc3\xa9\n"},
	    {"X: 12345", "x\n", 7, 0, "\00212345\n"},
	    {"X: 12345", "x\n", 6, -ENOSPC, ""},
	    {"X: 1, 2", "x\n", 5, -ENOSPC, ""},
	    {"", "x\ny\n", 3, -ENOSPC, ""},
	    {"", "", 0, 0, ""},
	    {"X: 1", "x", 64, 0, "\0021\n"}, /* a last name without its newline */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		char out[64];
		size_t len = 99;
		int rc = cache_vary_values(request(&m, "GET", cases[i].fields), cases[i].names,
					   strlen(cases[i].names), out, cases[i].cap, &len);
		if (rc != cases[i].rc || (rc == 0 && (len != strlen(cases[i].want) ||
						      memcmp(out, cases[i].want, len) != 0)))
			fail_msg("case %zu (%s): rc %d, %.*s", i, cases[i].fields, rc,
				 rc == 0 ? (int)len : 0, out);
	}
}

/* Requests that differ in more than whitespace around commas never share a key. */
static void vary_values_distinct(void **state)
{
	(void)state;
	static const char *const values[] = {
	    NULL,	   "",		"a",	"a,b",	"a, b, c", "a,,b",    "\"a,b\"",
	    "\"a\",\"b\"", "\"a , b\"", "a b",	"a  b", "A",	   "a;q=1,b", "\"a\\\",b\"",
	    "\"a\\\"\",b", "a,b,",	"\"\"", "\"",	"\" ,\"",  "\",\"",   "a\tb",
	    "a, \"b,c\"",  "a,\"b\",c",
	};
	size_t n = sizeof(values) / sizeof(values[0]);
	static char keys[sizeof(values) / sizeof(values[0])][128];
	size_t lens[sizeof(values) / sizeof(values[0])];
	for (size_t i = 0; i < n; i++) {
		struct msg m;
		char fields[64] = "";
		if (values[i])
			snprintf(fields, sizeof(fields), "X: %s", values[i]);
		assert_int_equal(cache_vary_values(request(&m, "GET", fields), "x\n", 2, keys[i],
						   sizeof(keys[i]), &lens[i]),
				 0);
	}
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (lens[i] == lens[j] && memcmp(keys[i], keys[j], lens[i]) == 0)
				fail_msg("\"%s\" and \"%s\" share a key",
					 values[i] ? values[i] : "(absent)",
					 values[j] ? values[j] : "(absent)");
}

/* CDN-Cache-Control (RFC 9213) in a response: a valid, non-empty Structured Fields dictionary
 * replaces Cache-Control (targeted); anything else leaves Cache-Control's reading as it was. */
static void targeted_cases(void **state)
{
	(void)state;
	static const struct {
		const char *fields;
		int64_t max_age, s_maxage, swr;
		unsigned flags, targeted;
	} cases[] = {
	    {"CDN-Cache-Control: max-age=60\nCache-Control: no-store", 60, U, U, PRES, 1},
	    {"Cache-Control: max-age=600\nCDN-Cache-Control: no-store", U, U, U, NS | PRES, 1},
	    {"CDN-Cache-Control: private, s-maxage=5", U, 5, U, PRIV | PRES, 1},
	    {"CDN-Cache-Control: public=?1, max-age=1;a=b;c, stale-while-revalidate=9", 1, U, 9,
	     PUB | PRES, 1},
	    /* a dictionary's last value counts; ?0 is the directive not given */
	    {"CDN-Cache-Control: max-age=0, max-age=30", 30, U, U, PRES, 1},
	    {"CDN-Cache-Control: no-store=?0, max-age=3", 3, U, U, PRES, 1},
	    {"CDN-Cache-Control: public\nCDN-Cache-Control: max-age=40", 40, U, U, PUB | PRES, 1},
	    /* not integers: malformed (stale at once), restrictive ones still obeyed */
	    {"CDN-Cache-Control: max-age=\"60\"", 0, U, U, PRES, 1},
	    {"CDN-Cache-Control: max-age=1.5, no-cache=\"set-cookie\"", 0, U, U, NC | PRES, 1},
	    {"CDN-Cache-Control: max-age=-1", 0, U, U, PRES, 1},
	    {"CDN-Cache-Control: max-age=tok, public=\"x\"", 0, U, U, PRES, 1},
	    {"CDN-Cache-Control: max-age=(1 2), private=:AAA=:", 0, U, U, PRIV | PRES, 1},
	    {"CDN-Cache-Control: max-age=999999999999999", BIG, U, U, PRES, 1},
	    /* no dictionary, or none given: Cache-Control decides */
	    {"CDN-Cache-Control: Max-Age=60\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: max-age=60,\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: ,max-age=60\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: max-age=60;\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: max-age=60 x\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: max-age=1234567890123456\nCache-Control: max-age=7", 7, U, U, PRES,
	     0},
	    {"CDN-Cache-Control: max-age=\"6\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: a=\"\\x\"\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: a=?2\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: a=(1\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: a=:b!:\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: max-age=60\nCDN-Cache-Control: x y\nCache-Control: max-age=7", 7,
	     U, U, PRES, 0},
	    {"CDN-Cache-Control:\nCache-Control: max-age=7", 7, U, U, PRES, 0},
	    {"CDN-Cache-Control: max-age=60", 60, U, U, PRES, 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		struct cache_control cc;
		cache_control_parse(response(&m, 200, cases[i].fields), 0, &cc);
		if (cc.max_age != cases[i].max_age || cc.s_maxage != cases[i].s_maxage ||
		    cc.stale_while_revalidate != cases[i].swr)
			fail_msg("case %zu (%s): max-age %lld s-maxage %lld swr %lld", i,
				 cases[i].fields, (long long)cc.max_age, (long long)cc.s_maxage,
				 (long long)cc.stale_while_revalidate);
		if (flags_of(&cc) != cases[i].flags || cc.targeted != cases[i].targeted)
			fail_msg("case %zu (%s): flags %#x targeted %u", i, cases[i].fields,
				 flags_of(&cc), cc.targeted);
	}
	/* a request's CDN-Cache-Control is no directive of its */
	struct msg m;
	struct cache_control cc;
	cache_control_parse(request(&m, "GET", "CDN-Cache-Control: no-store"), 1, &cc);
	assert_false(cc.no_store || cc.targeted || cc.present);
}

/* routes.cache.default_ttl_s: the lifetime of a 2xx/3xx without freshness, before the
 * heuristic; never for an error, never over explicit freshness or a targeted field's. */
static void default_ttl_cases(void **state)
{
	(void)state;
	static const struct cache_rules ttl = {.heuristic_pct = 10,
					       .heuristic_max_s = 86400,
					       .default_ttl_s = 600,
					       .stale_while_revalidate_s = U,
					       .stale_if_error_s = U};
	static const struct {
		int status;
		const char *fields;
		int64_t lifetime;
	} cases[] = {
	    {200, "Date: " D0, 600},
	    {200, "Date: " D0 "\nLast-Modified: Sun, 06 Nov 1994 07:49:37 GMT", 600},
	    {301, "Date: " D0, 600},
	    {200, "Date: " D0 "\nCache-Control: max-age=5", 5},
	    {200, "Date: " D0 "\nExpires: Sun, 06 Nov 1994 08:49:47 GMT", 10},
	    {200, "Date: " D0 "\nCDN-Cache-Control: max-age=9\nCache-Control: no-store", 9},
	    {200, "Date: " D0 "\nCDN-Cache-Control: public\nExpires: Sun, 06 Nov 1994 08:49:47 GMT",
	     600},
	    {404, "Date: " D0, 0},
	    {410, "Date: " D0, 0},
	    {500, "Date: " D0, 0},
	    {302, "Date: " D0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m;
		struct cache_control rs;
		struct cache_times t;
		const struct http_head *h = response(&m, cases[i].status, cases[i].fields);
		cache_control_parse(h, 0, &rs);
		cache_times_compute(h, &rs, T0, T0, &ttl, &t);
		if (t.lifetime != cases[i].lifetime)
			fail_msg("case %zu (%d %s): lifetime %lld, want %lld", i, cases[i].status,
				 cases[i].fields, (long long)t.lifetime,
				 (long long)cases[i].lifetime);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(control_cases),
	    cmocka_unit_test(targeted_cases),
	    cmocka_unit_test(default_ttl_cases),
	    cmocka_unit_test(storable_cases),
	    cmocka_unit_test(times_cases),
	    cmocka_unit_test(current_age),
	    cmocka_unit_test(decide_cases),
	    cmocka_unit_test(stale_if_error_cases),
	    cmocka_unit_test(date_cases),
	    cmocka_unit_test(date_two_digit_year),
	    cmocka_unit_test(date_format_round_trip),
	    cmocka_unit_test(not_modified_cases),
	    cmocka_unit_test(range_cases),
	    cmocka_unit_test(vary_name_cases),
	    cmocka_unit_test(vary_many_names),
	    cmocka_unit_test(vary_value_cases),
	    cmocka_unit_test(vary_values_distinct),
	};
	return cmocka_run_group_tests_name("cache_rfc", tests, NULL, NULL);
}
