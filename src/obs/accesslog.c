/*
 * accesslog.c - the rings, the writer thread and the two line formats of accesslog.h.
 *
 * The ring: head is written by its worker only, tail by the writer only; the worker
 * publishes a filled slot with a release store of head, the writer frees one with a release
 * store of tail. Full means head - tail == ALOG_RING_SLOTS.
 *
 * The writer takes up to a ring's worth of records from each ring in turn, formats each in its
 * slot (no copy) into a 256 KiB buffer and writes it whole (a short write is continued; an error,
 * ENOSPC say, is logged once a minute and the rest of the batch dropped and counted). SIGUSR1
 * (accesslog_reopen) sets a flag the writer reads before each batch: it opens the path again,
 * so `mv access.log access.log.1; kill -USR1` rotates. After a pass the writer naps 5 ms unless a
 * ring was half full or more (then it goes again at once), so a busy proxy's lines are written a
 * few milliseconds' worth at a time. Closing drains every ring first. Dropped lines (a full ring,
 * or a failed write) are logged as they grow (at most once a minute) and at close.
 *
 * syslog is spoken here rather than through syslog(3), which drops lines silently when no
 * daemon listens and can only use /dev/log: one datagram per line, "<30>Mmm dd hh:mm:ss
 * accelnet[PID]: LINE" (RFC 3164 as glibc writes it: facility daemon, level info), on a
 * connected unix datagram socket (syslog_socket, /dev/log by default). It is connected at
 * open, so a missing daemon is an error at start; a send that fails (the daemon restarted)
 * connects once more and sends again, else the line is dropped and counted. A send blocks at
 * most ALOG_SEND_TIMEOUT_S: a stuck daemon fills the rings, it cannot hang the exit.
 *
 * JSON strings escape ", \ and every byte below 0x20 or of 0x7f and above (as \u00XX: the
 * log stays ASCII whatever the client sent); the combined format escapes the same bytes as
 * \xXX and " as \" (nginx's escape=default).
 */
#include "obs/accesslog.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ALOG_BUF (256 * 1024)
#define ALOG_LINE_MAX 8192 /* the longest line: every string escaped at 6 bytes a byte */
#define ALOG_SYSLOG_PRI 30 /* LOG_DAEMON | LOG_INFO */
#define ALOG_SYSLOG_HEAD 64
#define ALOG_SEND_TIMEOUT_S 1
#define ALOG_NAP_MS 5 /* the writer's sleep between passes that found a ring under half full */

enum alog_dest { DEST_FILE, DEST_STDERR, DEST_SYSLOG };

struct accesslog {
	pthread_t thread;
	char *path;
	enum alog_dest dest;
	enum alog_format format;
	char *syslog_socket; /* DEST_SYSLOG: the daemon's socket */
	int fd;		     /* DEST_FILE: the file; DEST_SYSLOG: the connected socket */
	atomic_int reopen, stop;
	atomic_uint_fast64_t lost; /* lines the writer could not write: its own, read by scrapes */
	unsigned nrings;
	struct alog_ring *rings;
	char *buf;
};

struct alog_rec *alog_ring_claim(struct alog_ring *r)
{
	uint_fast32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint_fast32_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
	if (h - t >= ALOG_RING_SLOTS) {
		r->dropped_local++;
		atomic_store_explicit(&r->dropped, r->dropped_local, memory_order_relaxed);
		return NULL;
	}
	return &r->slot[h & (ALOG_RING_SLOTS - 1)];
}

void alog_ring_commit(struct alog_ring *r)
{
	uint_fast32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

const struct alog_rec *alog_ring_peek(struct alog_ring *r)
{
	uint_fast32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint_fast32_t h = atomic_load_explicit(&r->head, memory_order_acquire);
	return h == t ? NULL : &r->slot[t & (ALOG_RING_SLOTS - 1)];
}

void alog_ring_release(struct alog_ring *r)
{
	uint_fast32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	atomic_store_explicit(&r->tail, t + 1, memory_order_release);
}

int alog_ring_take(struct alog_ring *r, struct alog_rec *out)
{
	const struct alog_rec *s = alog_ring_peek(r);
	if (!s)
		return 0;
	*out = *s;
	alog_ring_release(r);
	return 1;
}

/* --- formats --- */

struct out {
	char *p;
	size_t len, cap;
	int full;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->full || o->len + n > o->cap) {
		o->full = 1;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

/* A string literal: its length known when compiled. */
#define PUT_LIT(o, lit) put((o), "" lit, sizeof(lit) - 1)

static void putf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = o->full ? 0 : o->cap - o->len;
	int n = vsnprintf(o->p + o->len, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room)
		o->full = 1;
	else
		o->len += (size_t)n;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Whether any of the 8 bytes in <w> needs an escape: below 0x20, 0x7f and up, " or \. Each
 * test is exact for "any" (a borrow or carry comes only out of a byte already found). */
static int word_needs_escape(uint64_t w)
{
	uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
	uint64_t low = (w - ONES * 0x20) & ~w; /* a byte below 0x20 */
	uint64_t high = (w + ONES) | w;	       /* a byte of 0x7f and up */
	return (((q - ONES) & ~q) | ((b - ONES) & ~b) | low | high) & HIGHS ? 1 : 0;
}

/* <s> escaped: JSON (\u00XX) or combined (\xXX); no quotes around it. Plain bytes are
 * looked at eight at a time and copied in runs: the writer spent most of a line here. */
static void put_escaped(struct out *o, const char *s, int json)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = strlen(s), i = 0, run = 0; /* s[run..i) needs no escape */
	while (i < n) {
		uint64_t w;
		if (n - i >= 8) {
			memcpy(&w, s + i, 8);
			if (!word_needs_escape(w)) {
				i += 8;
				continue;
			}
		}
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			i++;
			continue;
		}
		put(o, s + run, i - run);
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			put(o, e, 2);
		} else if (json) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			put(o, e, 6);
		} else {
			char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
			put(o, x, 4);
		}
		run = ++i;
	}
	put(o, s + run, n - run);
}

/* The numbers by hand: printf was most of the writer's time per line. */
static void put_u64(struct out *o, uint64_t v)
{
	char b[20];
	size_t n = 0;
	do {
		b[sizeof(b) - ++n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(o, b + sizeof(b) - n, n);
}

/* <us> as milliseconds with three decimals, as "%.3f" of us / 1000.0 writes them. */
static void put_ms(struct out *o, uint32_t us)
{
	put_u64(o, us / 1000);
	char f[4] = {'.', (char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10),
		     (char)('0' + us % 10)};
	put(o, f, 4);
}

/* A value after its key, JSON_STR and JSON_US: the key is a literal, ",\"key\":" one copy. */
static void json_str_value(struct out *o, const char *v)
{
	if (!*v) {
		PUT_LIT(o, "null");
		return;
	}
	PUT_LIT(o, "\"");
	put_escaped(o, v, 1);
	PUT_LIT(o, "\"");
}

static void json_us_value(struct out *o, uint32_t us)
{
	if (us == UINT32_MAX)
		PUT_LIT(o, "null");
	else
		put_ms(o, us);
}

#define JSON_STR(o, key, v) (PUT_LIT(o, ",\"" key "\":"), json_str_value(o, v))
#define JSON_US(o, key, us) (PUT_LIT(o, ",\"" key "\":"), json_us_value(o, us))

static void format_json(struct out *o, const struct alog_rec *r)
{
	/* the date and time to the second, made once a second (per thread: the writer's) */
	static _Thread_local time_t ts_for = -1;
	static _Thread_local char ts[32];
	time_t s = (time_t)(r->time_us / 1000000);
	if (s != ts_for) {
		struct tm tm;
		gmtime_r(&s, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S.", &tm);
		ts_for = s;
	}
	unsigned ms = (unsigned)(r->time_us / 1000 % 1000);
	char msz[5] = {(char)('0' + ms / 100), (char)('0' + ms / 10 % 10), (char)('0' + ms % 10),
		       'Z', '"'};
	PUT_LIT(o, "{\"time\":\"");
	puts_(o, ts);
	put(o, msz, sizeof(msz));
	JSON_STR(o, "request_id", r->reqid);
	JSON_STR(o, "trace_id", r->trace_id);
	JSON_STR(o, "span_id", r->span_id);
	JSON_STR(o, "client", r->client);
	JSON_STR(o, "tenant", r->tenant);
	JSON_STR(o, "method", r->method);
	JSON_STR(o, "protocol", r->protocol);
	if (r->path[0]) {
		PUT_LIT(o, ",\"path\":\"");
		put_escaped(o, r->path, 1);
		puts_(o, r->path_cut ? "...\"" : "\"");
	} else { /* a refused request whose request line could not be read */
		PUT_LIT(o, ",\"path\":null");
	}
	if (r->target[0]) { /* routes.rewrite changed it */
		PUT_LIT(o, ",\"forwarded_path\":\"");
		put_escaped(o, r->target, 1);
		puts_(o, r->target_cut ? "...\"" : "\"");
	} else if (r->path[0] && r->backend[0]) { /* forwarded as it came */
		PUT_LIT(o, ",\"forwarded_path\":\"");
		put_escaped(o, r->path, 1);
		puts_(o, r->path_cut ? "...\"" : "\"");
	} else {
		PUT_LIT(o, ",\"forwarded_path\":null");
	}
	JSON_STR(o, "route", r->route_name);
	JSON_STR(o, "pool", r->pool);
	JSON_STR(o, "backend", r->backend);
	if (r->prefill_backend[0])
		JSON_STR(o, "prefill_backend", r->prefill_backend);
	JSON_STR(o, "model", r->model);
	JSON_STR(o, "cache", r->cache);
	PUT_LIT(o, ",\"status\":");
	put_u64(o, (uint64_t)(r->status < 0 ? 0 : r->status));
	PUT_LIT(o, ",\"bytes_in\":");
	put_u64(o, r->bytes_in);
	PUT_LIT(o, ",\"bytes_out\":");
	put_u64(o, r->bytes_out);
	JSON_US(o, "queue_ms", r->queue_us);
	JSON_US(o, "connect_ms", r->connect_us);
	JSON_US(o, "ttfb_ms", r->ttfb_us);
	JSON_US(o, "total_ms", r->total_us);
	JSON_US(o, "upstream_ms", r->upstream_us);
	if (r->has_usage) {
		PUT_LIT(o, ",\"prompt_tokens\":");
		put_u64(o, r->prompt_tokens);
		PUT_LIT(o, ",\"completion_tokens\":");
		put_u64(o, r->completion_tokens);
	}
	if (r->has_cost) /* a decimal of the prices' currency, exact: micro-units */
		putf(o, ",\"cost\":%llu.%06llu", (unsigned long long)(r->cost_micros / 1000000),
		     (unsigned long long)(r->cost_micros % 1000000));
	if (r->cut)
		JSON_STR(o, "cut", r->cut);
	if (r->tokens) {
		PUT_LIT(o, ",\"tokens\":");
		put_u64(o, r->tokens);
		JSON_US(o, "token_gap_ms", r->gap_us);
	}
	JSON_STR(o, "user_agent", r->ua);
	PUT_LIT(o, "}\n");
}

static void combined_str(struct out *o, const char *v)
{
	if (!*v) {
		PUT_LIT(o, "-");
		return;
	}
	put_escaped(o, v, 0);
}

/* host - user [time] "request" status bytes "referer" "user-agent", then what the combined
 * format has no field for, as nginx users add it: rt= (seconds), the request id, pool,
 * backend and trace id. */
static void format_combined(struct out *o, const struct alog_rec *r)
{
	static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
	time_t s = (time_t)(r->time_us / 1000000);
	struct tm tm;
	gmtime_r(&s, &tm);
	combined_str(o, r->client);
	PUT_LIT(o, " - ");
	combined_str(o, r->tenant);
	putf(o, " [%02d/%s/%04d:%02d:%02d:%02d +0000] \"", tm.tm_mday, mon[tm.tm_mon],
	     tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (r->method[0]) {
		put_escaped(o, r->method, 0);
		PUT_LIT(o, " ");
		put_escaped(o, r->path, 0);
		puts_(o, r->path_cut ? "... " : " ");
		puts_(o, r->protocol[0] ? r->protocol : "HTTP/1.1");
	} else { /* a refused request whose request line could not be read */
		PUT_LIT(o, "-");
	}
	putf(o, "\" %d %" PRIu64 " \"-\" \"", r->status, r->bytes_out);
	put_escaped(o, r->ua, 0);
	if (r->total_us == UINT32_MAX) /* a refused request: no exchange was timed */
		PUT_LIT(o, "\" rt=- rid=");
	else
		putf(o, "\" rt=%.3f rid=", r->total_us / 1e6);
	combined_str(o, r->reqid);
	PUT_LIT(o, " pool=");
	combined_str(o, r->pool);
	PUT_LIT(o, " backend=");
	combined_str(o, r->backend);
	if (r->prefill_backend[0]) {
		PUT_LIT(o, " prefill=");
		combined_str(o, r->prefill_backend);
	}
	PUT_LIT(o, " trace=");
	combined_str(o, r->trace_id);
	PUT_LIT(o, "\n");
}

size_t alog_format_line(const struct alog_rec *r, enum alog_format f, char *out, size_t cap)
{
	struct out o = {.p = out, .cap = cap};
	if (f == ALOG_JSON)
		format_json(&o, r);
	else
		format_combined(&o, r);
	return o.full ? 0 : o.len;
}

/* --- the writer --- */

static int connect_syslog(struct accesslog *l)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(l->syslog_socket) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, l->syslog_socket, strlen(l->syslog_socket) + 1);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct timeval tv = {ALOG_SEND_TIMEOUT_S, 0};
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* (Re)open the file or (re)connect the syslog socket; the old one stays on failure. */
static int open_dest(struct accesslog *l)
{
	int fd;
	if (l->dest == DEST_STDERR)
		return 0;
	if (l->dest == DEST_SYSLOG)
		fd = connect_syslog(l);
	else if ((fd = open(l->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0)
		fd = -errno;
	if (fd < 0)
		return fd;
	if (l->fd >= 0)
		close(l->fd);
	l->fd = fd;
	return 0;
}

static void count_lost(struct accesslog *l, uint64_t n)
{
	atomic_store_explicit(&l->lost, atomic_load_explicit(&l->lost, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* Write p[0..n) whole; on an error the lines left are dropped and counted. */
static void write_all(struct accesslog *l, const char *p, size_t n)
{
	int fd = l->dest == DEST_STDERR ? 2 : l->fd;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			uint64_t lines = 0;
			for (size_t i = 0; i < n; i++)
				lines += p[i] == '\n';
			count_lost(l, lines);
			log_warn_every(60000, "access log %s: %s (%" PRIu64 " lines dropped)",
				       l->path, w < 0 ? strerror(e) : "short write", lines);
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

/* One datagram for the line at <line> (<n> bytes, its newline left out), taken at <time_us>. */
static void send_syslog(struct accesslog *l, const char *line, size_t n, uint64_t time_us)
{
	char head[ALOG_SYSLOG_HEAD];
	time_t s = (time_t)(time_us / 1000000);
	struct tm tm;
	localtime_r(&s, &tm);
	int h = snprintf(head, sizeof(head), "<%d>", ALOG_SYSLOG_PRI);
	h += (int)strftime(head + h, sizeof(head) - (size_t)h, "%b %e %H:%M:%S ", &tm);
	h += snprintf(head + h, sizeof(head) - (size_t)h, "accelnet[%ld]: ", (long)getpid());
	struct iovec iov[2] = {{head, (size_t)h}, {(void *)line, n}};
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
	for (int tries = 0; tries < 2; tries++) {
		if (sendmsg(l->fd, &msg, MSG_NOSIGNAL) >= 0)
			return;
		int e = errno;
		if (e == EINTR) {
			tries--;
			continue;
		}
		if (tries == 0 && e != EAGAIN && e != EWOULDBLOCK && open_dest(l) == 0)
			continue; /* the daemon went away and came back: its new socket */
		count_lost(l, 1);
		log_warn_every(60000, "access log syslog %s: %s (lines dropped)", l->syslog_socket,
			       strerror(e));
		return;
	}
}

/* One pass over the rings, each line formatted from its slot in place: the most records
 * one ring gave. */
static unsigned drain_once(struct accesslog *l)
{
	size_t len = 0;
	unsigned most = 0;
	for (unsigned i = 0; i < l->nrings; i++) {
		const struct alog_rec *rec;
		unsigned k = 0;
		for (; k < ALOG_RING_SLOTS && (rec = alog_ring_peek(&l->rings[i])); k++) {
			if (ALOG_BUF - len < ALOG_LINE_MAX) {
				write_all(l, l->buf, len);
				len = 0;
			}
			size_t n = alog_format_line(rec, l->format, l->buf + len, ALOG_LINE_MAX);
			uint64_t time_us = rec->time_us;
			alog_ring_release(&l->rings[i]);
			if (!n)
				continue;
			if (l->dest == DEST_SYSLOG) {
				send_syslog(l, l->buf + len, n - 1, time_us);
				continue;
			}
			len += n;
		}
		most = k > most ? k : most;
	}
	if (len)
		write_all(l, l->buf, len);
	return most;
}

static void *writer_main(void *arg)
{
	struct accesslog *l = arg;
	uint64_t reported = 0;
	for (;;) {
		uint64_t dropped = accesslog_dropped(l);
		if (dropped > reported) {
			log_warn_every(60000,
				       "access log %s: %" PRIu64 " lines dropped so far (the "
				       "writer fell behind or could not write)",
				       l->path, dropped);
			reported = dropped;
		}
		if (atomic_exchange(&l->reopen, 0)) {
			int rc = open_dest(l);
			if (rc < 0)
				log_error("access log %s: cannot open it again: %s (still writing "
					  "to the old one)",
					  l->path, strerror(-rc));
		}
		int stop = atomic_load(&l->stop);
		unsigned took = drain_once(l);
		if (took >= ALOG_RING_SLOTS / 2 || (stop && took))
			continue; /* falling behind (or closing): at once */
		if (stop)
			break;
		/* else a nap even when there were lines: batches of a few milliseconds' worth
		 * cost one write and one wake-up, not one per handful of lines */
		struct timespec ts = {0, ALOG_NAP_MS * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* What accesslog_open() made, the writer stopped or never started. */
static void accesslog_free(struct accesslog *l)
{
	if (!l)
		return;
	if (l->fd >= 0)
		close(l->fd);
	free(l->rings);
	free(l->buf);
	free(l->syslog_socket);
	free(l->path);
	free(l);
}

int accesslog_open(struct accesslog **out, const char *path, const char *syslog_socket,
		   enum alog_format f, unsigned nrings, char *err, size_t errlen)
{
	struct accesslog *l = calloc(1, sizeof(*l));
	int rc = -ENOMEM;
	if (!l)
		goto fail;
	l->fd = -1;
	l->format = f;
	l->nrings = nrings;
	l->dest = !strcmp(path, "stderr")   ? DEST_STDERR
		  : !strcmp(path, "syslog") ? DEST_SYSLOG
					    : DEST_FILE;
	l->path = strdup(path);
	l->syslog_socket = strdup(syslog_socket ? syslog_socket : "/dev/log");
	l->buf = malloc(ALOG_BUF);
	l->rings = aligned_alloc(64, (size_t)nrings * sizeof(*l->rings));
	if (!l->path || !l->syslog_socket || !l->buf || !l->rings)
		goto fail;
	memset(l->rings, 0, (size_t)nrings * sizeof(*l->rings));
	if ((rc = open_dest(l)) < 0)
		goto fail;
	if ((rc = -pthread_create(&l->thread, NULL, writer_main, l)) < 0)
		goto fail;
	*out = l;
	return 0;
fail:
	if (l && l->dest == DEST_SYSLOG && l->syslog_socket)
		snprintf(err, errlen,
			 "access log syslog: cannot connect to %s: %s (is a syslog daemon "
			 "running? access_log.syslog_socket names another socket)",
			 l->syslog_socket, strerror(-rc));
	else
		snprintf(err, errlen, "access log %s: %s", path, strerror(-rc));
	accesslog_free(l);
	return rc;
}

struct alog_ring *accesslog_ring(struct accesslog *l, unsigned i)
{
	return i < l->nrings ? &l->rings[i] : NULL;
}

void accesslog_reopen(struct accesslog *l)
{
	if (l)
		atomic_store(&l->reopen, 1);
}

uint64_t accesslog_dropped(const struct accesslog *l)
{
	uint64_t n = l ? atomic_load_explicit(&l->lost, memory_order_relaxed) : 0;
	for (unsigned i = 0; l && i < l->nrings; i++)
		n += atomic_load_explicit(&l->rings[i].dropped, memory_order_relaxed);
	return n;
}

void accesslog_close(struct accesslog *l)
{
	if (!l)
		return;
	atomic_store(&l->stop, 1);
	pthread_join(l->thread, NULL);
	uint64_t dropped = accesslog_dropped(l);
	if (dropped)
		log_warn("access log %s: %" PRIu64 " lines dropped (the writer fell behind or "
			 "could not write)",
			 l->path, dropped);
	accesslog_free(l);
}
