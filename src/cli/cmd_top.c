/*
 * cmd_top.c - `accelnet top`: the admin listener's /status as a terminal view, per pool and
 * per backend, redrawn in place every interval (like top).
 *
 * Each turn reads /status over one short HTTP/1.1 connection (cli/adminc.h: --admin, else
 * $ACCELNET_ADMIN, else the demo's address, as `ctl`; Bearer token of --token-file, else
 * $ACCELNET_ADMIN_TOKEN_FILE), parses it with jansson and draws one frame; rates are the
 * counter deltas between this read and the previous one divided by the time between them. The
 * document comes from the network, so nothing in it is trusted: the body is capped, jansson caps
 * the nesting, a value of the wrong type reads as absent ("-"), strings are drawn with control
 * characters replaced (no escape sequence from a peer reaches the terminal) and at most MAX_ROWS
 * backends are drawn. Live mode puts the terminal in non-canonical mode on the alternate screen,
 * cuts each frame to the window's size, and puts the terminal back on q, Ctrl-C or SIGTERM.
 * `--once` reads twice, one interval apart, prints one frame without escape sequences and exits.
 * Exit 1 with one line when the endpoint cannot be reached, refuses or answers something that is
 * not a /status document.
 */
#include "cli/cli.h"
#include "cli/adminc.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROWS 512 /* backends drawn per frame */

struct top {
	struct adminc ac; /* the admin endpoint, its token */
	int interval_ms;
	json_t *prev; /* the previous document, for rates */
	double prev_t;
	char err[640];
};

static volatile sig_atomic_t top_stop;

static void top_on_signal(int signo)
{
	(void)signo;
	top_stop = 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * GET /status; returns the parsed document (the caller frees it), or NULL with t->err
 * filled.
 */
static json_t *top_fetch(struct top *t)
{
	char *body = NULL;
	size_t len = 0;
	int code = 0;
	json_t *doc = NULL;
	if (adminc_call(&t->ac, "GET", "/status", NULL, 0, &code, &body, &len) < 0) {
		snprintf(t->err, sizeof(t->err), "%s", t->ac.err);
		return NULL;
	}
	if (code == 401) {
		snprintf(t->err, sizeof(t->err),
			 "admin endpoint %s:%s refused: 401 unauthorized (%s)", t->ac.host,
			 t->ac.port,
			 t->ac.token[0] ? "wrong token"
					: "give --token-file or $ACCELNET_ADMIN_TOKEN_FILE");
		goto fail;
	}
	if (code != 200) {
		snprintf(t->err, sizeof(t->err), "admin endpoint %s:%s answered HTTP %d",
			 t->ac.host, t->ac.port, code);
		goto fail;
	}
	json_error_t je;
	doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!doc)
		snprintf(t->err, sizeof(t->err),
			 "admin endpoint %s:%s: /status is not valid JSON (line %d: %.80s)",
			 t->ac.host, t->ac.port, je.line, je.text);
	else if (!json_is_array(json_object_get(doc, "pools"))) {
		snprintf(t->err, sizeof(t->err),
			 "admin endpoint %s:%s: /status has no \"pools\" list", t->ac.host,
			 t->ac.port);
		json_decref(doc);
		doc = NULL;
	}
fail:
	for (char *e = t->err; *e; e++) /* jansson quotes the peer's bytes */
		if (*e < ' ' || *e > '~')
			*e = '?';
	free(body);
	return doc;
}

/* A number at <key> of <o> (a.b for one level down), or -1 when absent or not a number. */
static double num(const json_t *o, const char *key)
{
	const char *dot = strchr(key, '.');
	if (dot) {
		char head[64];
		size_t hl = (size_t)(dot - key);
		if (hl >= sizeof(head))
			return -1;
		memcpy(head, key, hl);
		head[hl] = 0;
		return num(json_object_get(o, head), dot + 1);
	}
	const json_t *v = json_object_get(o, key);
	if (json_is_true(v))
		return 1;
	if (json_is_false(v))
		return 0;
	return json_is_number(v) && json_number_value(v) >= 0 ? json_number_value(v) : -1;
}

/* A string at <key>, printable: control and non-ASCII bytes become '?', cut at <max>. */
static const char *str(const json_t *o, const char *key, char *out, size_t max)
{
	const char *s = json_string_value(json_object_get(o, key));
	size_t i = 0;
	for (; s && s[i] && i + 1 < max; i++)
		out[i] = s[i] >= ' ' && s[i] <= '~' ? s[i] : '?';
	out[i] = 0;
	return s ? out : "-";
}

/* Errors of a backend: 5xx answers, aborted exchanges and failed connects. */
static double backend_errors(const json_t *b)
{
	double e = 0, v;
	if ((v = num(b, "responses.5xx")) > 0)
		e += v;
	if ((v = num(b, "responses.aborted")) > 0)
		e += v;
	if ((v = num(b, "connect_failures")) > 0)
		e += v;
	return e;
}

/* The same backend (pool name and address) in the previous document, or NULL. */
static const json_t *prev_backend(const struct top *t, const char *pool, const char *addr)
{
	const json_t *pools = json_object_get(t->prev, "pools");
	size_t np = json_array_size(pools);
	for (size_t i = 0; i < np && i < MAX_ROWS; i++) {
		const json_t *p = json_array_get(pools, i);
		const char *pn = json_string_value(json_object_get(p, "name"));
		if (!pn || strcmp(pn, pool))
			continue;
		const json_t *bs = json_object_get(p, "backends");
		for (size_t k = 0; k < json_array_size(bs) && k < MAX_ROWS; k++) {
			const json_t *b = json_array_get(bs, k);
			const char *a = json_string_value(json_object_get(b, "address"));
			if (a && !strcmp(a, addr))
				return b;
		}
	}
	return NULL;
}

static void put_num(FILE *f, int width, double v, int decimals)
{
	if (v < 0)
		fprintf(f, " %*s", width, "-");
	else
		fprintf(f, " %*.*f", width, decimals, v);
}

/* The process's counter <key> of the series <name> in <doc> (/status "process"), or -1. */
static double process_series(const json_t *doc, const char *key, const char *name)
{
	const json_t *proc = json_array_get(json_object_get(doc, "process"), 0);
	const json_t *v = json_object_get(json_object_get(proc, key), name);
	return json_is_number(v) && json_number_value(v) >= 0 ? json_number_value(v) : -1;
}

/* The protocol mix: requests a second, and in all, by the protocol clients spoke. */
static void top_protocols(const struct top *t, FILE *f, const json_t *doc, double dt)
{
	static const char *const names[] = {"HTTP/1.0", "HTTP/1.1", "HTTP/2"};
	fputs("requests by protocol:", f);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		double n = process_series(doc, "client_requests", names[i]);
		double p = t->prev ? process_series(t->prev, "client_requests", names[i]) : -1;
		fprintf(f, "  %s", names[i]);
		put_num(f, 1, dt > 0 && p >= 0 && n >= p ? (n - p) / dt : -1, 1);
		if (n >= 0)
			fprintf(f, "/s (%.0f)", n);
		else
			fputs("/s", f);
	}
	fputc('\n', f);
}

/* One frame of <doc> into <f>; <dt> seconds since the previous document (0: no rates). */
static void top_draw(const struct top *t, FILE *f, const json_t *doc, double dt, int live)
{
	char when[32], sbuf[64], sbuf2[32];
	time_t wall = time(NULL);
	struct tm tm;
	strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&wall, &tm));
	fprintf(f, "accelnet top - %s:%s  %s  every %.1fs%s\n", t->ac.host, t->ac.port, when,
		t->interval_ms / 1000.0, live ? "  (q quits)" : "");
	if (t->err[0])
		fprintf(f, "last read failed: %s\n", t->err);
	top_protocols(t, f, doc, dt);
	const json_t *pools = json_object_get(doc, "pools");
	size_t rows = 0;
	for (size_t i = 0; i < json_array_size(pools) && rows < MAX_ROWS; i++) {
		const json_t *p = json_array_get(pools, i);
		const json_t *bs = json_object_get(p, "backends");
		const char *pname = json_string_value(json_object_get(p, "name"));
		double rate = 0, erate = 0, reqs = 0, errs = 0;
		int have_rate = dt > 0 && pname;
		for (size_t k = 0; k < json_array_size(bs); k++) {
			const json_t *b = json_array_get(bs, k);
			const char *a = json_string_value(json_object_get(b, "address"));
			const json_t *pb = have_rate && a ? prev_backend(t, pname, a) : NULL;
			double r = num(b, "requests"), e = backend_errors(b);
			reqs += r > 0 ? r : 0;
			errs += e;
			if (pb && r >= num(pb, "requests"))
				rate += (r - num(pb, "requests")) / dt;
			if (pb && e >= backend_errors(pb))
				erate += (e - backend_errors(pb)) / dt;
			if (k >= MAX_ROWS)
				break;
		}
		fprintf(f, "\nPOOL %s (%s)  req/s", str(p, "name", sbuf, 40),
			str(p, "balance", sbuf2, 24));
		put_num(f, 1, have_rate ? rate : -1, 1);
		fprintf(f, "  err/s");
		put_num(f, 1, have_rate ? erate : -1, 1);
		fprintf(f, "  requests %.0f  errors %.0f  queue", reqs, errs);
		put_num(f, 1, num(p, "queue.length"), 0);
		fprintf(f, "  queue wait p99 ms");
		put_num(f, 1, num(p, "queue.wait_ms.p99"), 0);
		fprintf(f, "  unavailable");
		put_num(f, 1, num(p, "unavailable"), 0);
		fprintf(f, "\n  %-24s %-8s %8s %7s %9s %7s %8s %8s %9s %5s %6s\n", "BACKEND",
			"STATE", "REQ/S", "ERR/S", "REQUESTS", "ERRORS", "TTFB50", "TTFB99",
			"LAT_MS", "INFL", "SLOTS");
		for (size_t k = 0; k < json_array_size(bs) && rows < MAX_ROWS; k++, rows++) {
			const json_t *b = json_array_get(bs, k);
			const char *a = json_string_value(json_object_get(b, "address"));
			const json_t *pb = have_rate && a ? prev_backend(t, pname, a) : NULL;
			double r = num(b, "requests"), e = backend_errors(b);
			char abuf[16];
			/* what the admin API made of it first: it says why it takes nothing */
			const char *adm = str(b, "state", abuf, sizeof(abuf));
			const char *state = strcmp(adm, "-") && strcmp(adm, "enabled") ? adm
					    : num(b, "ejected") == 1		       ? "ejected"
					    : num(b, "up") == 0			       ? "down"
					    : num(b, "eligible") == 0		       ? "inelig"
					    : num(b, "up") == 1			       ? "up"
										       : "-";
			fprintf(f, "  %-24s %-8s", str(b, "address", sbuf, 25), state);
			put_num(f, 8,
				pb && r >= num(pb, "requests") ? (r - num(pb, "requests")) / dt
							       : -1,
				1);
			put_num(f, 7,
				pb && e >= backend_errors(pb) ? (e - backend_errors(pb)) / dt : -1,
				1);
			put_num(f, 9, r, 0);
			put_num(f, 7, e, 0);
			put_num(f, 8, num(b, "ttfb_ms.p50"), 0);
			put_num(f, 8, num(b, "ttfb_ms.p99"), 0);
			put_num(f, 9, num(b, "latency_ms"), 1);
			put_num(f, 5, num(b, "inflight"), 0);
			double slots = num(b, "max_concurrency");
			put_num(f, 6, slots > 0 ? slots : -1, 0);
			fputc('\n', f);
		}
	}
	if (rows >= MAX_ROWS)
		fprintf(f, "\n(only the first %d backends are shown)\n", MAX_ROWS);
}

/* Wait up to <ms> for a key; 1 when the user asked to quit (q, Q or Ctrl-C). */
static int top_wait_key(int ms, int tty)
{
	double end = now_s() + ms / 1000.0;
	while (!top_stop) {
		int left = (int)((end - now_s()) * 1000);
		if (left <= 0)
			return 0;
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		int rc = poll(&p, tty ? 1 : 0, left);
		if (rc > 0) {
			char c;
			ssize_t n = read(STDIN_FILENO, &c, 1);
			if (n <= 0 || c == 'q' || c == 'Q' || c == 3)
				return 1;
		}
	}
	return 1;
}

/* Read once, keep the document as the base for rates. 0, or -1 with t->err filled. */
static int top_sample(struct top *t, json_t **doc, double *dt)
{
	json_t *d = top_fetch(t);
	double at = now_s();
	if (!d)
		return -1;
	t->err[0] = 0;
	*dt = t->prev ? at - t->prev_t : 0;
	json_decref(*doc);
	*doc = d;
	return 0;
}

static void top_keep(struct top *t, json_t *doc)
{
	json_decref(t->prev);
	t->prev = json_incref(doc);
	t->prev_t = now_s();
}

/* <frame> cut to the terminal's size (it is ASCII only: one byte, one column), so that a
 * long line never wraps and a long list never scrolls the header away. */
static void top_put_fitted(const char *frame, size_t flen)
{
	struct winsize ws = {0};
	size_t cols = SIZE_MAX, rows = SIZE_MAX, row = 0;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
		cols = ws.ws_col;
		rows = ws.ws_row;
	}
	for (const char *p = frame, *end = frame + flen; p < end && row + 1 < rows; row++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		fwrite(p, 1, n < cols ? n : cols, stdout);
		fputs(nl ? "\n" : "", stdout);
		p = nl ? nl + 1 : end;
	}
}

static int top_live(struct top *t, json_t *doc)
{
	struct termios saved, raw;
	int tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
	if (tty) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	}
	fputs("\033[?1049h\033[?25l", stdout);
	double dt = 0;
	while (!top_stop) {
		char *frame = NULL;
		size_t flen = 0;
		FILE *f = open_memstream(&frame, &flen);
		if (f) {
			top_draw(t, f, doc, dt, 1);
			fclose(f);
			fputs("\033[H\033[2J", stdout);
			top_put_fitted(frame, flen);
			fflush(stdout);
			free(frame);
		}
		if (top_wait_key(t->interval_ms, tty))
			break;
		top_keep(t, doc);
		if (top_sample(t, &doc, &dt) < 0)
			dt = 0; /* the frame says so; the last figures stay */
	}
	fputs("\033[?25h\033[?1049l", stdout);
	fflush(stdout);
	if (tty)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	json_decref(doc);
	return 0;
}

int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"admin", required_argument, NULL, 'a'},
	    {"token-file", required_argument, NULL, 't'},
	    {"interval-ms", required_argument, NULL, 'i'},
	    {"once", no_argument, NULL, 'o'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct top t = {.interval_ms = 1000};
	const char *admin = NULL, *token_file = NULL;
	int once = 0, c, rc = 1;
	json_t *doc = NULL;
	char *end;
	long v;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			admin = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'i':
			v = strtol(optarg, &end, 10);
			if (!*optarg || *end || v < 100 || v > 3600000) {
				fprintf(stderr,
					"accelnet top: --interval-ms takes 100 to 3600000, "
					"not '%s'\n",
					optarg);
				return 2;
			}
			t.interval_ms = (int)v;
			break;
		case 'o':
			once = 1;
			break;
		case 'h':
			cli_usage(stdout, "top");
			return 0;
		default:
			cli_usage(stderr, "top");
			return 2;
		}
	}
	if (optind != argc) {
		cli_usage(stderr, "top");
		return 2;
	}
	adminc_from_env(&admin, &token_file);
	if (adminc_parse_addr(&t.ac, admin) < 0) {
		fprintf(stderr, "accelnet top: --admin takes HOST:PORT, not '%s'\n", admin);
		return 2;
	}
	if (token_file && adminc_load_token(&t.ac, token_file) < 0) {
		fprintf(stderr, "accelnet top: %s\n", t.ac.err);
		return 2;
	}
	struct sigaction sa = {.sa_handler = top_on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	double dt = 0;
	if (top_sample(&t, &doc, &dt) < 0)
		goto fail;
	if (!once) {
		rc = top_live(&t, doc);
		doc = NULL;
		goto out;
	}
	top_keep(&t, doc);
	if (top_wait_key(t.interval_ms, 0))
		goto out;
	if (top_sample(&t, &doc, &dt) < 0)
		goto fail;
	top_draw(&t, stdout, doc, dt, 0);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "accelnet top: %s\n", t.err);
out:
	json_decref(doc);
	json_decref(t.prev);
	adminc_wipe(&t.ac);
	return rc;
}
