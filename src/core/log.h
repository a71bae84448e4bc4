/*
 * log.h - leveled logging to standard error.
 *
 * One line per message, prefixed by wall-clock time, level and the calling thread's tag
 * ("main", "w0", "sim"...). Messages under the global level are dropped before formatting.
 * fatal() is for start-up only: it logs and exits 1.
 */
#ifndef ACCELNET_CORE_LOG_H
#define ACCELNET_CORE_LOG_H

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

extern enum log_level log_threshold;

void log_set_thread_tag(const char *tag);
int log_parse_level(const char *name, enum log_level *out);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) (log_threshold >= LOG_DEBUG ? log_msg(LOG_DEBUG, __VA_ARGS__) : (void)0)

#endif
