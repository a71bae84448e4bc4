/*
 * log.h - leveled logging to standard error.
 *
 * One line per message, prefixed by wall-clock time, level and the calling thread's tag
 * ("main", "w0", "sim"...). Messages under the global level are dropped before formatting.
 * fatal() is for start-up only: it logs and exits 1.
 *
 * A line that an outside event can repeat at will (a flood, a full descriptor table) goes
 * through log_warn_every(): one call site logs at most once per interval, and the line after
 * a quiet spell says how many were dropped, so an attack cannot fill the disk through us.
 */
#ifndef ACCELNET_CORE_LOG_H
#define ACCELNET_CORE_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

extern enum log_level log_threshold;

void log_set_thread_tag(const char *tag);
int log_parse_level(const char *name, enum log_level *out);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One call site's rate limit; zero-initialised (a static) is ready to use. */
struct log_rate {
	atomic_uint_fast64_t next_ms; /* no line before this, on the monotonic clock */
	atomic_uint suppressed;	      /* lines dropped since the last one written */
};

/*
 * Whether a line of <r> may be written at <now_ms> (then none for <every_ms>); if so,
 * *suppressed gets the number dropped since the previous one. Safe from any thread.
 */
int log_rate_pass(struct log_rate *r, unsigned every_ms, uint64_t now_ms, unsigned *suppressed);
void log_rated(struct log_rate *r, unsigned every_ms, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* log_warn(), at most once per <every_ms> from this call site, "(K similar suppressed)". */
#define log_warn_every(every_ms, ...)                                                              \
	do {                                                                                       \
		static struct log_rate log_rate_;                                                  \
		log_rated(&log_rate_, (every_ms), LOG_WARN, __VA_ARGS__);                          \
	} while (0)

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) (log_threshold >= LOG_DEBUG ? log_msg(LOG_DEBUG, __VA_ARGS__) : (void)0)

/* An invariant failed (the macros of core/check.h): log where and what, then abort. */
_Noreturn void check_fail(const char *file, int line, const char *what);

#endif
