/*
 * log.c - leveled logging and the invariant-failure handler.
 *
 * Each line is formatted into a stack buffer and written with a single write(2), so lines
 * from several worker threads never interleave mid-line. Rate-limited lines (log.h) keep
 * their state in a static at each call site, so limiting one site never silences another.
 */
#include "core/log.h"
#include "core/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum log_level log_threshold = LOG_INFO;
static _Thread_local const char *thread_tag = "main";
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_thread_tag(const char *tag)
{
	thread_tag = tag;
}

int log_parse_level(const char *name, enum log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

static void log_vwrite(enum log_level level, const char *fmt, va_list ap)
{
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n =
	    snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %-5s [%s] ", tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], thread_tag);
	if (n < 0)
		return;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level > log_threshold)
		return;
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}

int log_rate_pass(struct log_rate *r, unsigned every_ms, uint64_t now_ms, unsigned *suppressed)
{
	uint_fast64_t next = atomic_load_explicit(&r->next_ms, memory_order_relaxed);
	if (now_ms < next ||
	    !atomic_compare_exchange_strong(&r->next_ms, &next, now_ms + every_ms)) {
		atomic_fetch_add_explicit(&r->suppressed, 1, memory_order_relaxed);
		return 0;
	}
	*suppressed = atomic_exchange_explicit(&r->suppressed, 0, memory_order_relaxed);
	return 1;
}

void log_rated(struct log_rate *r, unsigned every_ms, enum log_level level, const char *fmt, ...)
{
	char text[1536];
	unsigned dropped;
	if (level > log_threshold || !log_rate_pass(r, every_ms, clock_now_ms(), &dropped))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (dropped)
		log_msg(level, "%s (%u similar suppressed)", text, dropped);
	else
		log_msg(level, "%s", text);
}

void fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(LOG_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}

void check_fail(const char *file, int line, const char *what)
{
	log_msg(LOG_ERROR, "invariant failed at %s:%d: %s", file, line, what);
	abort();
}
