/*
 * fresh.c - RFC 9111's storage, freshness and age rules for a shared cache (see fresh.h),
 * and HTTP-dates.
 *
 * Three sets of status codes decide what may be stored. Final statuses "understood" (RFC 9111
 * section 3: we know what caching them means, so must-understand may override no-store for
 * them): 200 203 204 300 301 302 303 307 308 404 405 410 414 501. The heuristically cacheable
 * ones of RFC 9110 15.1 minus 206 (we store only complete responses; a 206 is answered from a
 * stored 200 by cond.c, never stored): 200 203 204 300 301 308 404 405 410 414 501. Any other
 * final status (500, 503, 403 ...) is stored only with explicit freshness (max-age, s-maxage,
 * Expires), which the origin gave on purpose; public alone does not make it storable. 304 is
 * never stored (it refreshes a stored response) nor is 1xx.
 *
 * Heuristic freshness, a MAY of 4.2.2, is given only to heuristically cacheable statuses with
 * a Last-Modified, never to a response that is merely public (also a MAY, not taken). The
 * route's default time to live (routes.cache.default_ttl_s) comes before it: a lifetime the
 * operator chose for responses of theirs without explicit freshness, given to the
 * heuristically cacheable statuses under 400 only (200 203 204 300 301 308: never an error),
 * and never making storable what section 3 would not store (no-store, private, no-cache
 * still revalidating, Authorization).
 *
 * Every time is an int64 of seconds and every sum and difference saturates: ages and
 * lifetimes are clamped to [0, 2^31] (RFC 9111 1.2.2 and 5.1: an overflowing age is 2^31),
 * so a hostile Date, Expires, Age or Last-Modified can make a response stale or old, never
 * wrap it into fresh. HTTP-dates are parsed by hand (no strptime, timegm or locale) over
 * years 1970-9999; RFC 850's two-digit year is placed within 50 years of the clock, the only
 * place the clock is read.
 */
#include "cache/fresh.h"
#include "cache/vary.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

static int status_understood(int s)
{
	switch (s) {
	case 200:
	case 203:
	case 204:
	case 300:
	case 301:
	case 302:
	case 303:
	case 307:
	case 308:
	case 404:
	case 405:
	case 410:
	case 414:
	case 501:
		return 1;
	}
	return 0;
}

static int status_heuristic(int s)
{
	return status_understood(s) && s != 302 && s != 303 && s != 307;
}

static int64_t clamp_delta(int64_t v)
{
	return v < 0 ? 0 : v > CACHE_DELTA_MAX ? CACHE_DELTA_MAX : v;
}

/* a - b, saturated at the int64 limits */
static int64_t sat_sub(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_sub_overflow(a, b, &r))
		return b < 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static int64_t sat_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static int has_explicit_freshness(const struct http_head *resp, const struct cache_control *rs)
{
	return rs->max_age != CACHE_UNSET || rs->s_maxage != CACHE_UNSET ||
	       (!rs->targeted && http_find_header(resp, "expires") != NULL);
}

/* "status NNN" for each status a parsed response can have (100-599), written once. */
static char status_why[500][sizeof("status 599")];
static pthread_once_t status_why_once = PTHREAD_ONCE_INIT;

static void status_why_fill(void)
{
	for (int i = 0; i < 500; i++) {
		int s = i + 100;
		memcpy(status_why[i], "status ", 7);
		status_why[i][7] = (char)('0' + s / 100);
		status_why[i][8] = (char)('0' + s / 10 % 10);
		status_why[i][9] = (char)('0' + s % 10);
		status_why[i][10] = 0;
	}
}

static const char *status_reason(int s)
{
	if (s < 100 || s > 599)
		return "status";
	pthread_once(&status_why_once, status_why_fill);
	return status_why[s - 100];
}

const char *cache_storable(const struct http_head *req, const struct cache_control *rq,
			   const struct http_head *resp, const struct cache_control *rs,
			   const struct cache_rules *rules)
{
	if (req->meth != HTTP_GET)
		return "not GET";
	int s = resp->status, explicit_fresh = has_explicit_freshness(resp, rs);
	if (s < 200 || s > 599 || s == 206 || s == 304 ||
	    (!status_understood(s) && !explicit_fresh) ||
	    (rs->must_understand && !status_understood(s)))
		return status_reason(s);
	if (rq->no_store)
		return "no-store";
	if (rs->no_store && !rs->must_understand)
		return "no-store";
	if (rs->private_)
		return "private";
	char names[1024];
	size_t nlen;
	int v = cache_vary_names(resp, names, sizeof(names), &nlen);
	if (v == 1)
		return "Vary: *";
	if (v < 0)
		return "Vary too long";
	if ((rules->authorization || http_find_header(req, "authorization")) &&
	    !(rules->store_authorized &&
	      (rs->public_ || rs->s_maxage != CACHE_UNSET || rs->must_revalidate)))
		return "Authorization";
	if (http_find_header(resp, "set-cookie") && !rules->store_cookies)
		return "Set-Cookie";
	if (!explicit_fresh && !rs->public_ && !status_heuristic(s))
		return "no freshness";
	return NULL;
}

/* --- HTTP-date ---------------------------------------------------------------------- */

#define YEAR_MIN 1970
#define YEAR_MAX 9999
#define TIME_MAX 253402300799LL /* 9999-12-31 23:59:59 */

static const char month_names[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					"Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char day_names[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const day_names_long[7] = {"Sunday",	  "Monday", "Tuesday", "Wednesday",
					      "Thursday", "Friday", "Saturday"};
static const uint16_t days_before_month[12] = {0,   31,	 59,  90,  120, 151,
					       181, 212, 243, 273, 304, 334};

static int is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int64_t y, int m)
{
	static const uint8_t n[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	return n[m - 1] + (m == 2 && is_leap(y));
}

/* Days from 1970-01-01 to y-m-d (m 1-12, d 1-31): days since 0001-01-01, less 719162. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t before = y - 1;
	int64_t days = before * 365 + before / 4 - before / 100 + before / 400;
	days += days_before_month[m - 1] + (m > 2 && is_leap(y)) + d - 1;
	return days - 719162;
}

/* The year of day <days> since 1970 (>= 0), and the day's offset within it. */
static int64_t year_of_day(int64_t days, int64_t *day_of_year)
{
	int64_t y = YEAR_MIN + days / 365; /* never too small */
	while (days_from_civil(y, 1, 1) > days)
		y--;
	*day_of_year = days - days_from_civil(y, 1, 1);
	return y;
}

/* Exactly <n> ASCII digits at p. */
static int read_digits(const char *p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	*out = v;
	return 0;
}

static int read_month(const char *p)
{
	for (int m = 0; m < 12; m++)
		if (memcmp(p, month_names[m], 3) == 0)
			return m + 1;
	return 0;
}

static int is_day_name(const char *p)
{
	for (int i = 0; i < 7; i++)
		if (memcmp(p, day_names[i], 3) == 0)
			return 1;
	return 0;
}

/* "HH:MM:SS" at p (8 bytes): seconds into the day, or -1. A leap second (60) is taken. */
static int64_t read_time(const char *p)
{
	int hh, mm, ss;
	if (read_digits(p, 2, &hh) || p[2] != ':' || read_digits(p + 3, 2, &mm) || p[5] != ':' ||
	    read_digits(p + 6, 2, &ss) || hh > 23 || mm > 59 || ss > 60)
		return -1;
	return hh * 3600 + mm * 60 + ss;
}

static int make_time(int64_t y, int m, int d, int64_t secs, int64_t *out)
{
	if (y < YEAR_MIN || y > YEAR_MAX || m < 1 || d < 1 || d > days_in_month(y, m) || secs < 0)
		return -1;
	int64_t t = days_from_civil(y, m, d) * 86400 + secs;
	*out = t > TIME_MAX ? TIME_MAX : t; /* 9999-12-31 23:59:60 */
	return 0;
}

/* RFC 9110 5.6.7: a two-digit year more than 50 years ahead of now is in the last century. */
static int64_t place_two_digit_year(int yy)
{
	int64_t doy, now = (int64_t)time(NULL);
	int64_t cur = now > 0 ? year_of_day(now / 86400, &doy) : YEAR_MIN;
	int64_t y = cur - cur % 100 + yy;
	if (y > cur + 50)
		y -= 100;
	else if (y <= cur - 50)
		y += 100;
	return y;
}

int cache_parse_http_date(struct http_str s, int64_t *out)
{
	const char *p = s.p;
	int d, m, y;
	int64_t secs;
	if (!p)
		return -1;
	if (s.len == 29 && p[3] == ',') { /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
		if (!is_day_name(p) || p[4] != ' ' || read_digits(p + 5, 2, &d) || p[7] != ' ' ||
		    !(m = read_month(p + 8)) || p[11] != ' ' || read_digits(p + 12, 4, &y) ||
		    p[16] != ' ' || (secs = read_time(p + 17)) < 0 ||
		    memcmp(p + 25, " GMT", 4) != 0)
			return -1;
		return make_time(y, m, d, secs, out);
	}
	if (s.len == 24 && p[3] == ' ') { /* asctime: Sun Nov  6 08:49:37 1994 */
		if (!is_day_name(p) || !(m = read_month(p + 4)) || p[7] != ' ' || p[10] != ' ' ||
		    (p[8] == ' ' ? read_digits(p + 9, 1, &d) : read_digits(p + 8, 2, &d)) ||
		    (secs = read_time(p + 11)) < 0 || p[19] != ' ' || read_digits(p + 20, 4, &y))
			return -1;
		return make_time(y, m, d, secs, out);
	}
	for (int i = 0; i < 7; i++) { /* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT */
		size_t n = strlen(day_names_long[i]);
		if (s.len != n + 24 || memcmp(p, day_names_long[i], n) != 0)
			continue;
		const char *q = p + n;
		int yy;
		if (q[0] != ',' || q[1] != ' ' || read_digits(q + 2, 2, &d) || q[4] != '-' ||
		    !(m = read_month(q + 5)) || q[8] != '-' || read_digits(q + 9, 2, &yy) ||
		    q[11] != ' ' || (secs = read_time(q + 12)) < 0 ||
		    memcmp(q + 20, " GMT", 4) != 0)
			return -1;
		return make_time(place_two_digit_year(yy), m, d, secs, out);
	}
	return -1;
}

void cache_format_http_date(int64_t t, char out[30])
{
	t = t < 0 ? 0 : t > TIME_MAX ? TIME_MAX : t;
	int64_t days = t / 86400, secs = t % 86400, doy;
	int64_t y = year_of_day(days, &doy);
	int m = 1;
	while (m < 12 && days_before_month[m] + (m >= 2 && is_leap(y)) <= doy)
		m++;
	int64_t d = doy - days_before_month[m - 1] - (m > 2 && is_leap(y)) + 1;
	snprintf(out, 30, "%s, %02d %s %04d %02d:%02d:%02d GMT", day_names[(days + 4) % 7], (int)d,
		 month_names[m - 1], (int)y, (int)(secs / 3600), (int)(secs / 60 % 60),
		 (int)(secs % 60));
}

/* --- freshness and age -------------------------------------------------------------- */

/* The one field named <name> parsed as an HTTP-date; -1 when absent, repeated or invalid. */
static int date_field(const struct http_head *h, const char *name, int64_t *out)
{
	const struct http_header *f = http_find_only_header(h, name);
	return f ? cache_parse_http_date(f->value, out) : -1;
}

/* Age (5.1): delta-seconds saturated at 2^31; 0 when absent, repeated or not digits. */
static int64_t age_value(const struct http_head *h)
{
	const struct http_header *f = http_find_only_header(h, "age");
	if (!f || f->value.len == 0)
		return 0;
	int64_t v = 0;
	for (uint32_t i = 0; i < f->value.len; i++) {
		char c = f->value.p[i];
		if (c < '0' || c > '9')
			return 0;
		if (v < CACHE_DELTA_MAX)
			v = v * 10 + (c - '0');
	}
	return clamp_delta(v);
}

static int64_t heuristic_lifetime(const struct http_head *resp, int64_t date_value,
				  const struct cache_rules *rules)
{
	int64_t lm;
	if (!rules->heuristic_pct || rules->heuristic_max_s <= 0 ||
	    date_field(resp, "last-modified", &lm) < 0 || lm >= date_value)
		return 0;
	int64_t since = clamp_delta(sat_sub(date_value, lm)),
		cap = clamp_delta(rules->heuristic_max_s);
	int64_t v = since / 100 * rules->heuristic_pct + since % 100 * rules->heuristic_pct / 100;
	return v > cap ? cap : v; /* since <= 2^31 and pct < 2^32: no overflow */
}

void cache_times_compute(const struct http_head *resp, const struct cache_control *rs,
			 int64_t request_time, int64_t response_time,
			 const struct cache_rules *rules, struct cache_times *t)
{
	*t = (struct cache_times){.response_time = response_time};
	int64_t date_value, expires;
	if (date_field(resp, "date", &date_value) < 0)
		date_value = response_time;

	if (rs->s_maxage != CACHE_UNSET)
		t->lifetime = clamp_delta(rs->s_maxage);
	else if (rs->max_age != CACHE_UNSET)
		t->lifetime = clamp_delta(rs->max_age);
	else if (!rs->targeted && http_find_header(resp, "expires"))
		t->lifetime = date_field(resp, "expires", &expires) < 0
				  ? 0
				  : clamp_delta(sat_sub(expires, date_value));
	else if (rules->default_ttl_s > 0 && status_heuristic(resp->status) && resp->status < 400)
		t->lifetime = clamp_delta(rules->default_ttl_s);
	else if (status_heuristic(resp->status)) {
		t->lifetime = heuristic_lifetime(resp, date_value, rules);
		t->heuristic = t->lifetime > 0;
	}

	int64_t apparent_age = clamp_delta(sat_sub(response_time, date_value));
	int64_t response_delay = clamp_delta(sat_sub(response_time, request_time));
	int64_t corrected_age_value = clamp_delta(age_value(resp) + response_delay);
	t->corrected_initial_age =
	    apparent_age > corrected_age_value ? apparent_age : corrected_age_value;

	t->no_cache = rs->no_cache;
	t->must_revalidate =
	    rs->must_revalidate || rs->proxy_revalidate || rs->s_maxage != CACHE_UNSET;
	t->stale_while_revalidate = rs->stale_while_revalidate != CACHE_UNSET
					? rs->stale_while_revalidate
					: rules->stale_while_revalidate_s;
	t->stale_if_error =
	    rs->stale_if_error != CACHE_UNSET ? rs->stale_if_error : rules->stale_if_error_s;
}

int64_t cache_current_age(const struct cache_times *t, int64_t now)
{
	int64_t resident_time = clamp_delta(sat_sub(now, t->response_time));
	return clamp_delta(sat_add(clamp_delta(t->corrected_initial_age), resident_time));
}

/* How stale (> 0), or how much fresher than stale (<= 0: fresh), at <age>. */
static int64_t staleness(const struct cache_times *t, int64_t age)
{
	return age - clamp_delta(t->lifetime); /* both in [0, 2^31] */
}

enum cache_use cache_decide_use(const struct cache_times *t, const struct cache_control *rq,
				int64_t now)
{
	if (rq->no_cache || t->no_cache)
		return CACHE_USE_REVALIDATE;
	int64_t age = cache_current_age(t, now), over = staleness(t, age);
	if (rq->max_age != CACHE_UNSET && age > rq->max_age)
		return CACHE_USE_REVALIDATE;
	if (rq->min_fresh != CACHE_UNSET && -over < rq->min_fresh)
		return CACHE_USE_REVALIDATE;
	if (over < 0)
		return CACHE_USE_FRESH;
	if (t->must_revalidate)
		return CACHE_USE_REVALIDATE;
	if (rq->max_stale != CACHE_UNSET && over <= rq->max_stale)
		return CACHE_USE_STALE;
	/* a request's max-age or min-fresh refuses stale unless it also gives max-stale (5.2.1.1)
	 */
	if (t->stale_while_revalidate >= 0 && over <= t->stale_while_revalidate &&
	    rq->max_age == CACHE_UNSET && rq->min_fresh == CACHE_UNSET)
		return CACHE_USE_SWR;
	return CACHE_USE_REVALIDATE;
}

int cache_stale_if_error_ok(const struct cache_times *t, const struct cache_control *rq,
			    int64_t now)
{
	if (t->must_revalidate || t->no_cache)
		return 0;
	int64_t over = staleness(t, cache_current_age(t, now));
	int64_t limit = t->stale_if_error;
	if (rq->stale_if_error > limit)
		limit = rq->stale_if_error;
	return limit >= 0 && over <= limit;
}
