/*
 * test_accesslog.c - the access log's ring (order kept, a full ring drops and counts, a
 * producer and a consumer on two threads lose nothing), its two line formats (escaping,
 * cut paths, a line that does not fit) and the writer (every pushed record reaches the
 * file by close).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "obs/accesslog.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct alog_ring *ring_new(void)
{
	struct alog_ring *r = aligned_alloc(64, sizeof(*r));
	assert_non_null(r);
	memset(r, 0, sizeof(*r));
	return r;
}

static void push(struct alog_ring *r, int status)
{
	struct alog_rec *s = alog_ring_claim(r);
	assert_non_null(s);
	memset(s, 0, sizeof(*s));
	s->status = status;
	alog_ring_commit(r);
}

static void full_ring_drops_and_counts_order_kept(void **state)
{
	(void)state;
	struct alog_ring *r = ring_new();
	struct alog_rec out;
	assert_int_equal(alog_ring_take(r, &out), 0);
	for (int i = 0; i < ALOG_RING_SLOTS; i++)
		push(r, i);
	assert_null(alog_ring_claim(r));
	assert_null(alog_ring_claim(r));
	assert_int_equal(atomic_load(&r->dropped), 2);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(alog_ring_take(r, &out), 1);
		assert_int_equal(out.status, i);
	}
	for (int i = 0; i < 10; i++) /* room again, and the order goes on across the wrap */
		push(r, ALOG_RING_SLOTS + i);
	assert_null(alog_ring_claim(r));
	for (int i = 10; i < ALOG_RING_SLOTS + 10; i++) {
		assert_int_equal(alog_ring_take(r, &out), 1);
		assert_int_equal(out.status, i);
	}
	assert_int_equal(alog_ring_take(r, &out), 0);
	assert_int_equal(atomic_load(&r->dropped), 3);
	free(r);
}

#define N_THREADED 200000

static void *producer(void *arg)
{
	struct alog_ring *r = arg;
	for (int i = 0; i < N_THREADED;) {
		struct alog_rec *s = alog_ring_claim(r);
		if (!s)
			continue; /* counted as dropped: the test subtracts them */
		s->status = i++;
		alog_ring_commit(r);
	}
	return NULL;
}

static void two_threads_keep_order(void **state)
{
	(void)state;
	struct alog_ring *r = ring_new();
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, producer, r), 0);
	struct alog_rec out;
	int next = 0;
	while (next < N_THREADED)
		if (alog_ring_take(r, &out))
			assert_int_equal(out.status, next++);
	pthread_join(t, NULL);
	assert_int_equal(alog_ring_take(r, &out), 0);
	free(r);
}

static struct alog_rec sample(void)
{
	struct alog_rec r = {.time_us = 1700000000123456ull,
			     .bytes_in = 80,
			     .bytes_out = 12,
			     .queue_us = 0,
			     .connect_us = UINT32_MAX,
			     .ttfb_us = 1500,
			     .total_us = 2500,
			     .status = 200,
			     .route = 1,
			     .upstream_us = UINT32_MAX};
	strcpy(r.route_name, "1");
	strcpy(r.reqid, "abc");
	strcpy(r.trace_id, "0af7651916cd43dd8448eb211c80319c");
	strcpy(r.span_id, "b7ad6b7169203331");
	strcpy(r.client, "10.0.0.1");
	strcpy(r.method, "GET");
	strcpy(r.protocol, "HTTP/2");
	strcpy(r.pool, "p");
	strcpy(r.path, "/a\"b\\c\x01\xc3\xa9");
	strcpy(r.ua, "u\"a");
	return r;
}

static void json_line_escapes_everything(void **state)
{
	(void)state;
	struct alog_rec r = sample();
	char out[4096];
	size_t n = alog_format_line(&r, ALOG_JSON, out, sizeof(out));
	assert_true(n > 0);
	out[n] = 0;
	assert_string_equal(
	    out,
	    "{\"time\":\"2023-11-14T22:13:20.123Z\",\"request_id\":\"abc\","
	    "\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"b7ad6b7169203331\","
	    "\"client\":\"10.0.0.1\","
	    "\"tenant\":null,\"method\":\"GET\",\"protocol\":\"HTTP/2\",\"path\":\"/"
	    "a\\\"b\\\\c\\u0001\\u00c3\\u00a9\","
	    "\"forwarded_path\":null,\"route\":\"1\",\"pool\":\"p\",\"backend\":null,"
	    "\"model\":null,\"cache\":null,\"status\":200,\"bytes_in\":80,"
	    "\"bytes_out\":12,\"queue_ms\":0.000,\"connect_ms\":null,\"ttfb_ms\":1.500,"
	    "\"total_ms\":2.500,\"upstream_ms\":null,\"user_agent\":\"u\\\"a\"}\n");
	/* a rewritten request: both targets; a model, its tokens, the cache, the backend's time */
	strcpy(r.target, "/v1/x?q=1");
	strcpy(r.model, "llama");
	strcpy(r.cache, "miss");
	r.upstream_us = 2000;
	r.has_usage = 1;
	r.prompt_tokens = 5;
	r.completion_tokens = 7;
	n = alog_format_line(&r, ALOG_JSON, out, sizeof(out));
	assert_true(n > 0);
	out[n] = 0;
	assert_non_null(strstr(out, "\"forwarded_path\":\"/v1/x?q=1\",\"route\":\"1\""));
	assert_non_null(strstr(out, "\"model\":\"llama\",\"cache\":\"miss\","));
	assert_non_null(strstr(out, "\"upstream_ms\":2.000,\"prompt_tokens\":5,"
				    "\"completion_tokens\":7,"));
	/* combined stays as it was: none of these in it */
	n = alog_format_line(&r, ALOG_COMBINED, out, sizeof(out));
	out[n] = 0;
	assert_null(strstr(out, "llama"));
	assert_null(strstr(out, "/v1/x"));
	r = sample();
	/* a line that does not fit is not cut: it is left out */
	assert_int_equal(alog_format_line(&r, ALOG_JSON, out, 40), 0);
}

/* The numbers are written by hand: the same text as printf's, whatever the value, and the
 * time (made once a second) right when the second changes and when it goes back. */
static void json_numbers_as_printf_writes_them(void **state)
{
	(void)state;
	static const uint32_t us[] = {0,    1,	  9,	  10,	  99,	   100,		  999,
				      1000, 1001, 123456, 999999, 1000000, UINT32_MAX - 1};
	static const uint64_t times[] = {1700000000999999ull, 1700000001000000ull,
					 1700000000000001ull, 1700003600500000ull};
	static const uint64_t bytes[] = {0, 7, 1234567890123ull, UINT64_MAX};
	for (size_t i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
		struct alog_rec r = sample();
		r.ttfb_us = us[i];
		r.tokens = us[i];
		r.gap_us = us[i];
		r.time_us = times[i % 4];
		r.bytes_in = bytes[i % 4];
		r.route = (int)(i % 3) - 1;
		if (r.route < 0)
			r.route_name[0] = 0;
		else
			snprintf(r.route_name, sizeof(r.route_name), "%d", r.route);
		r.status = (int)i * 50;
		char out[4096], want[256], ts[32];
		size_t n = alog_format_line(&r, ALOG_JSON, out, sizeof(out));
		assert_true(n > 0);
		out[n] = 0;
		time_t s = (time_t)(r.time_us / 1000000);
		struct tm tm;
		gmtime_r(&s, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(want, sizeof(want), "{\"time\":\"%s.%03uZ\"", ts,
			 (unsigned)(r.time_us / 1000 % 1000));
		assert_non_null(strstr(out, want));
		snprintf(want, sizeof(want), "\"status\":%d,\"bytes_in\":%llu,", r.status,
			 (unsigned long long)r.bytes_in);
		assert_non_null(strstr(out, want));
		snprintf(want, sizeof(want), "\"ttfb_ms\":%.3f,", us[i] / 1000.0);
		assert_non_null(strstr(out, want));
		if (us[i]) {
			snprintf(want, sizeof(want), "\"tokens\":%u,\"token_gap_ms\":%.3f,", us[i],
				 us[i] / 1000.0);
			assert_non_null(strstr(out, want));
		}
		if (r.route < 0)
			assert_non_null(strstr(out, "\"route\":null,"));
		else {
			snprintf(want, sizeof(want), "\"route\":\"%d\",", r.route);
			assert_non_null(strstr(out, want));
		}
	}
}

/* Escapes looked for eight bytes at a time: every byte value at every place of a string
 * longer than a word comes out as the byte-at-a-time rule says. */
static void every_byte_escaped_at_every_place(void **state)
{
	(void)state;
	static const char hex[] = "0123456789abcdef";
	for (int json = 0; json < 2; json++)
		for (unsigned v = 1; v < 256; v++)
			for (size_t at = 0; at < 19; at++) {
				struct alog_rec r = sample();
				memset(r.path, 'a', 19);
				r.path[19] = 0;
				r.path[at] = (char)v;
				char want[256], *p = want, out[4096];
				for (size_t i = 0; i < 19; i++) {
					unsigned char c = (unsigned char)r.path[i];
					if (c == '"' || c == '\\')
						p += sprintf(p, "\\%c", c);
					else if (c < 0x20 || c >= 0x7f)
						p += sprintf(p, json ? "\\u00%c%c" : "\\x%c%c",
							     hex[c >> 4], hex[c & 15]);
					else
						*p++ = (char)c;
				}
				*p = 0;
				size_t n = alog_format_line(&r, json ? ALOG_JSON : ALOG_COMBINED,
							    out, sizeof(out));
				assert_true(n > 0);
				out[n] = 0;
				char framed[300];
				snprintf(framed, sizeof(framed),
					 json ? "\"path\":\"%s\"" : "\"GET %s HTTP", want);
				if (!strstr(out, framed))
					fail_msg("byte %#x at %zu: %s", v, at, out);
			}
}

static void combined_line(void **state)
{
	(void)state;
	struct alog_rec r = sample();
	r.path_cut = 1;
	char out[4096];
	size_t n = alog_format_line(&r, ALOG_COMBINED, out, sizeof(out));
	assert_true(n > 0);
	out[n] = 0;
	assert_string_equal(
	    out, "10.0.0.1 - - [14/Nov/2023:22:13:20 +0000] \"GET "
		 "/a\\\"b\\\\c\\x01\\xc3\\xa9... HTTP/2\" 200 12 \"-\" \"u\\\"a\" "
		 "rt=0.003 rid=abc pool=p backend=- trace=0af7651916cd43dd8448eb211c80319c\n");
}

static void writer_writes_everything_by_close(void **state)
{
	(void)state;
	char path[] = "/tmp/accelnet-alog-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct accesslog *l;
	char err[256];
	assert_int_equal(accesslog_open(&l, path, NULL, ALOG_JSON, 2, err, sizeof(err)), 0);
	for (int i = 0; i < 100; i++) {
		struct alog_ring *r = accesslog_ring(l, (unsigned)i % 2);
		struct alog_rec *s = alog_ring_claim(r);
		if (!s) { /* the writer is behind: wait for it, as no worker would */
			i--;
			usleep(1000);
			continue;
		}
		*s = sample();
		alog_ring_commit(r);
	}
	assert_int_equal(accesslog_dropped(l), 0);
	accesslog_close(l);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[4096];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += line[strlen(line) - 1] == '\n';
	fclose(f);
	unlink(path);
	assert_int_equal(n, 100);
	assert_int_equal(
	    accesslog_open(&l, "/nonexistent/dir/x.log", NULL, ALOG_JSON, 1, err, sizeof(err)),
	    -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/dir/x.log"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(full_ring_drops_and_counts_order_kept),
	    cmocka_unit_test(two_threads_keep_order),
	    cmocka_unit_test(json_line_escapes_everything),
	    cmocka_unit_test(json_numbers_as_printf_writes_them),
	    cmocka_unit_test(every_byte_escaped_at_every_place),
	    cmocka_unit_test(combined_line),
	    cmocka_unit_test(writer_writes_everything_by_close),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
