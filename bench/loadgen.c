/*
 * loadgen.c - the load generators behind bench/run that wrk cannot be.
 *
 *   loadgen open --target H:P --path P --body JSON --rate R --duration S
 *       Open loop: request i is due at start + i/R whatever happened to the others, on an
 *       idle keep-alive connection or a new one, and its latency is measured from when it
 *       was due, not from when it could be sent, so a stalled server cannot hide its queue
 *       (no coordinated omission).
 *   loadgen open --target H:P --path P --bodies FILE --rate R --duration S [--slo-ms MS]
 *       The same open loop, but request i carries line i of FILE as its JSON body (a trace:
 *       one body per line, in send order; sending stops at the last line or at S seconds).
 *       In open mode the time to first token (TTFT: from when the request was due to the
 *       first bytes of its 200 response's body, the first SSE event of a stream) is recorded
 *       for every request; one that never got there (an error status, a failure, or
 *       unanswered at the deadline) counts as 1e9 ms. "goodput_slo" is the requests answered
 *       200 in full whose TTFT was at most --slo-ms (default 1000), per second of sending.
 *       For a 200 whose body is an event stream, the inter-token latency too ("itl_ms"): per
 *       stream, the gap between the arrivals of one Server-Sent Event (its blank line) and
 *       the next, after the first and leaving out "[DONE]"; events that come in one read
 *       have a gap of 0, as the client saw them. The ends are found byte by byte as the
 *       chunks pass (no copy, nothing allocated per event: the gaps go into an array sized
 *       at start, doubled when it fills).
 *   loadgen open ... --bodies FILE --at TIMES --rate R --duration S
 *       The same, but request i is due TIMES' line i seconds after the start (one number a
 *       line, not decreasing: bursts and lulls, as a trace's arrivals come) instead of at
 *       i/R; R (still required) then only names the offered rate in the output.
 *   loadgen open ... --warmup W
 *       Requests due in the first W seconds are sent as the others but counted in no figure
 *       (a cold fleet's first seconds); every rate is per second of the rest.
 *   loadgen open --target A --target B ...
 *       Several targets (up to MAX_TARGETS: instances of one service): request i goes to
 *       target i mod N, each on that target's own connections; the figures are of all the
 *       requests together (percentiles of the merged samples), and "per_target" says how
 *       many each was sent and answered 200 (the warm-up's included).
 *   loadgen open ... --bodies FILE --samples OUT
 *       Also one line per request into OUT at the end (tab-separated, a header line first):
 *       its index, target, when it was due (ms after the start), how late it was sent, its
 *       status, TTFT, the response head's and the end's time after due (ms), and what the
 *       head said of it: X-Sim-Wait-Ms, X-Sim-Service-Ms, X-Sim-Cached-Blocks,
 *       X-Sim-Prompt-Blocks, X-Served-By and X-Accelnet-Llm (cut at 200 bytes). Each request
 *       then carries X-Request-Id: lg-INDEX, so a proxy that trusts the client logs it under
 *       that id (its access log's queue wait, backend and times join on it).
 *   In open mode "per_second" gives, for each second of sending (by when requests were due),
 *   the requests due in it and those of them that counted towards goodput_slo: an outage in
 *   the middle of a run shows where it begins and where the figures recover.
 *   loadgen sse --target H:P --path P --body JSON --streams N
 *       N concurrent token streams from `accelnet sim`; each event's "sent_ns" (the sender's
 *       CLOCK_MONOTONIC) gives the delay from the accelerator to this client per token.
 *   loadgen idle --target H:P --conns N
 *       Open N keep-alive connections, make one request on each, print a line, and hold
 *       them until standard input closes (memory per idle connection).
 *
 * Each prints one JSON object on standard output. Latencies are in milliseconds.
 */
#include "core/clock.h"
#include "core/loop.h"
#include "http/chunked.h"
#include "http/parse.h"
#include "net/addr.h"
#include "net/sock.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum mode { M_OPEN, M_SSE, M_IDLE };

#define MAX_TARGETS 16

struct conn {
	struct loop_io io;
	struct conn *next_idle;
	unsigned target; /* which --target it is connected to */
	char *in;
	size_t in_len, in_cap, sent;
	const char *req; /* the request being sent on it */
	size_t req_len;
	const char *body; /* --bodies: sent after req (the head, formatted into reqhead[]) */
	size_t body_len;
	char reqhead[320];
	int connecting, busy, head_done;
	uint64_t due_ns, start_ns;
	struct http_head head;
	size_t head_len;
	struct http_chunked ch;
	uint64_t body_left;
	/* sse: payload text not yet split into events */
	char *ev;
	size_t ev_len, ev_cap;
	int got_token;
	double ttft_ms;
	size_t idx; /* --bodies: the request's line */
	/* open: the stream's events (itl_ms) */
	int ev_nl;	     /* the last body byte was a '\n' */
	unsigned events;     /* events ended so far */
	uint64_t ev_last_ns; /* when the last one ended */
};

/* --samples: what one request did, and what its response's head said of it */
struct sample {
	uint64_t due_ns, start_ns, head_ns, first_ns, end_ns;
	int status, sim_wait_ms, sim_service_ms, cached, prompt;
	unsigned target;
	char served[24], llm[200];
};

static struct {
	enum mode mode;
	struct net_addr addr[MAX_TARGETS];
	unsigned ntargets;
	uint64_t target_sent[MAX_TARGETS], target_ok[MAX_TARGETS];
	char **reqs; /* one request, or one per prompt prefix (--prefixes) */
	size_t *req_lens;
	unsigned nreqs;
	uint64_t pick; /* chooses each request's prefix, the same sequence every run */
	const char *path;
	char *bodies; /* --bodies: the file's text, NUL at each line's end */
	const char **body;
	size_t *body_len, nbodies;
	double *at; /* --at: request i is due at[i] seconds after the start */
	size_t nat;
	uint64_t warm_ns, warm_sent;   /* --warmup, and the requests sent in it */
	uint64_t *sec_sent, *sec_good; /* open: per second of sending, by due time */
	size_t nsec;
	double slo_ms;
	uint64_t good_slo;
	double rate;
	double duration;
	unsigned streams, conns, max_conns;
	uint64_t timeout_ns;
	struct loop *loop;
	struct loop_timer tick;
	struct conn *idle[MAX_TARGETS], *held;
	uint64_t start_ns, next_i;
	unsigned open_conns, outstanding, finished_streams;
	uint64_t ok, errors, no_conn, status[6];
	double *lat; /* ms, per completed request (open) or per token (sse) */
	size_t nlat, caplat;
	double *ttft; /* time to first token (sse; open: per request) */
	size_t nttft, capttft;
	double *itl; /* open: gaps between a stream's events */
	size_t nitl, capitl;
	int done_sending;
	struct sample *samples; /* --samples: one per body */
} g;

static void record(double **arr, size_t *n, size_t *cap, double v)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 4096;
		*arr = realloc(*arr, *cap * sizeof(**arr));
		if (!*arr) {
			perror("loadgen: out of memory");
			exit(1);
		}
	}
	(*arr)[(*n)++] = v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static void print_dist(const char *name, double *v, size_t n)
{
	if (n)
		qsort(v, n, sizeof(*v), cmp_double);
	printf(
	    "\"%s\":{\"n\":%zu,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}",
	    name, n, pct(v, n, 50), pct(v, n, 90), pct(v, n, 99), pct(v, n, 99.9),
	    n ? v[n - 1] : 0.0);
}

static void conn_free(struct conn *c)
{
	loop_io_del(g.loop, &c->io);
	close(c->io.fd);
	free(c->in);
	free(c->ev);
	free(c);
	g.open_conns--;
}

static void maybe_finish(void)
{
	if (g.mode == M_OPEN && g.done_sending && !g.outstanding)
		loop_stop(g.loop);
	if (g.mode == M_SSE && g.finished_streams == g.streams)
		loop_stop(g.loop);
	if (g.mode == M_IDLE && g.finished_streams == g.conns)
		loop_stop(g.loop);
}

/* The second of sending <due_ns> falls in (the last one for any later). */
static size_t second_of(uint64_t due_ns)
{
	size_t s = due_ns > g.start_ns ? (size_t)((due_ns - g.start_ns) / 1000000000u) : 0;
	return s < g.nsec ? s : g.nsec - 1;
}

/* A request due in the --warmup seconds: counted in no figure. */
static int in_warmup(uint64_t due_ns)
{
	return due_ns < g.start_ns + g.warm_ns;
}

/* The request on <c> failed: count it and drop the connection. */
static void conn_fail(struct conn *c)
{
	if (c->busy) {
		g.errors += !in_warmup(c->due_ns);
		g.outstanding--;
		g.finished_streams++;
	}
	conn_free(c);
	maybe_finish();
}

static void conn_send(struct conn *c)
{
	while (c->sent < c->req_len + c->body_len) {
		struct iovec iov[2];
		struct msghdr m = {.msg_iov = iov};
		if (c->sent < c->req_len) {
			iov[0] = (struct iovec){(char *)c->req + c->sent, c->req_len - c->sent};
			iov[1] = (struct iovec){(char *)c->body, c->body_len};
			m.msg_iovlen = c->body_len ? 2 : 1;
		} else {
			size_t off = c->sent - c->req_len;
			iov[0] = (struct iovec){(char *)c->body + off, c->body_len - off};
			m.msg_iovlen = 1;
		}
		ssize_t n = sendmsg(c->io.fd, &m, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN)
				conn_fail(c);
			return;
		}
		c->sent += (size_t)n;
	}
}

static int header_int(const struct http_head *h, const char *name)
{
	const struct http_header *f = http_find_header(h, name);
	return f ? atoi(f->value.p) : -1; /* the value ends at the field's CRLF */
}

static void header_copy(const struct http_head *h, const char *name, char *out, size_t len)
{
	const struct http_header *f = http_find_header(h, name);
	size_t n = f ? (f->value.len < len - 1 ? f->value.len : len - 1) : 0;
	if (f)
		memcpy(out, f->value.p, n);
	out[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (out[i] == '\t' || out[i] == '\n')
			out[i] = ' ';
}

/* --samples: the response head of request <c> came at <now>. */
static void sample_head(struct conn *c, uint64_t now)
{
	if (!g.samples)
		return;
	struct sample *s = &g.samples[c->idx];
	s->head_ns = now;
	s->status = c->head.status;
	s->sim_wait_ms = header_int(&c->head, "x-sim-wait-ms");
	s->sim_service_ms = header_int(&c->head, "x-sim-service-ms");
	s->cached = header_int(&c->head, "x-sim-cached-blocks");
	s->prompt = header_int(&c->head, "x-sim-prompt-blocks");
	header_copy(&c->head, "x-served-by", s->served, sizeof(s->served));
	header_copy(&c->head, "x-accelnet-llm", s->llm, sizeof(s->llm));
}

static double ms_after(uint64_t t, uint64_t due)
{
	return t ? (double)(int64_t)(t - due) / 1e6 : -1;
}

/* --samples: every request's line into <path>. */
static int samples_write(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		return -1;
	}
	fprintf(f, "i\ttarget\tdue_ms\tsend_lag_ms\tstatus\tttft_ms\thead_ms\tend_ms\tsim_wait_ms\t"
		   "sim_service_ms\tcached_blocks\tprompt_blocks\tserved_by\tllm\n");
	for (size_t i = 0; i < g.next_i && i < g.nbodies; i++) {
		const struct sample *s = &g.samples[i];
		if (!s->due_ns)
			continue;
		fprintf(f, "%zu\t%u\t%.3f\t%.3f\t%d\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t%d\t%s\t%s\n", i,
			s->target, (double)(s->due_ns - g.start_ns) / 1e6,
			ms_after(s->start_ns, s->due_ns), s->status,
			ms_after(s->first_ns, s->due_ns), ms_after(s->head_ns, s->due_ns),
			ms_after(s->end_ns, s->due_ns), s->sim_wait_ms, s->sim_service_ms,
			s->cached, s->prompt, s->served[0] ? s->served : "-",
			s->llm[0] ? s->llm : "-");
	}
	return fclose(f) ? -1 : 0;
}

/*
 * Open mode: the first bytes of the response body arrived, its time to first token; only a
 * 200's (an error's body is no token: a request that got one never got its first token).
 */
static void first_token(struct conn *c, uint64_t now)
{
	if (c->got_token || c->head.status != 200)
		return;
	c->got_token = 1;
	c->ttft_ms = (double)(now - c->due_ns) / 1e6;
	if (g.samples)
		g.samples[c->idx].first_ns = now;
	if (!in_warmup(c->due_ns))
		record(&g.ttft, &g.nttft, &g.capttft, c->ttft_ms);
}

/* Open mode: body bytes d[0..n) of a 200 arrived at <now>; each event that ends in them
 * (a blank line) after the stream's first gives a gap since the one before. */
static void stream_gaps(struct conn *c, const char *d, size_t n, uint64_t now)
{
	if (c->head.status != 200 || in_warmup(c->due_ns))
		return;
	size_t from = 0;
	for (size_t i = 0; i < n; i++) {
		if (d[i] != '\n') {
			c->ev_nl = 0;
			continue;
		}
		if (!c->ev_nl) {
			c->ev_nl = 1;
			continue;
		}
		c->ev_nl = 0;
		int done = memmem(d + from, i + 1 - from, "[DONE]", 6) != NULL;
		from = i + 1;
		if (done)
			continue;
		if (c->events++)
			record(&g.itl, &g.nitl, &g.capitl, (double)(now - c->ev_last_ns) / 1e6);
		c->ev_last_ns = now;
	}
}

static void sse_events(struct conn *c, uint64_t now)
{
	if (!c->ev_len)
		return;
	char *p = c->ev, *end = c->ev + c->ev_len;
	for (;;) {
		char *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
		if (!sep)
			break;
		char *t = memmem(p, (size_t)(sep - p), "\"sent_ns\":", 10);
		if (t) {
			unsigned long long sent = strtoull(t + 10, NULL, 10);
			record(&g.lat, &g.nlat, &g.caplat, (double)(now - sent) / 1e6);
			if (!c->got_token) {
				record(&g.ttft, &g.nttft, &g.capttft,
				       (double)(now - c->start_ns) / 1e6);
				c->got_token = 1;
			}
		}
		p = sep + 2;
	}
	memmove(c->ev, p, (size_t)(end - p));
	c->ev_len = (size_t)(end - p);
}

/* The response on <c> is complete. */
static void conn_done(struct conn *c, uint64_t now)
{
	int status = c->head.status, counted = g.mode != M_OPEN || !in_warmup(c->due_ns);
	g.target_ok[c->target] += status == 200;
	if (g.samples)
		g.samples[c->idx].end_ns = now;
	if (counted) {
		g.status[status / 100 < 6 ? status / 100 : 0]++;
		if (status == 200)
			g.ok++;
		else
			g.errors++;
	}
	if (g.mode == M_OPEN && status == 200 && counted) {
		record(&g.lat, &g.nlat, &g.caplat, (double)(now - c->due_ns) / 1e6);
		if (c->got_token && c->ttft_ms <= g.slo_ms) {
			g.good_slo++;
			g.sec_good[second_of(c->due_ns)]++;
		}
	}
	g.outstanding--;
	g.finished_streams++;
	int keep = !(c->head.flags & HTTP_F_CLOSE) && c->head.framing != HTTP_BODY_CLOSE;
	c->busy = c->head_done = 0;
	c->in_len = 0;
	if (g.mode == M_IDLE) {
		/* held open until the end; its buffer is not needed any more */
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
		c->next_idle = g.held;
		g.held = c;
		maybe_finish();
		return;
	}
	if (!keep) {
		conn_free(c);
	} else {
		c->next_idle = g.idle[c->target];
		g.idle[c->target] = c;
	}
	maybe_finish();
}

static void conn_read(struct conn *c)
{
	for (;;) {
		if (c->in_cap - c->in_len < 16384) {
			c->in_cap = c->in_cap ? c->in_cap * 2 : 65536;
			c->in = realloc(c->in, c->in_cap);
			if (!c->in) {
				conn_fail(c);
				return;
			}
		}
		ssize_t n = recv(c->io.fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			if (c->busy && c->head_done && c->head.framing == HTTP_BODY_CLOSE) {
				conn_done(c, clock_now_ns());
				if (g.mode != M_IDLE)
					return;
			}
			conn_fail(c);
			return;
		}
		uint64_t now = clock_now_ns();
		if (!c->busy) {
			conn_fail(c); /* bytes nobody asked for */
			return;
		}
		c->in_len += (size_t)n;
		if (!c->head_done) {
			int r = http_parse_response(c->in, c->in_len, 65536, HTTP_POST, &c->head);
			if (r == 0)
				continue;
			if (r < 0) {
				conn_fail(c);
				return;
			}
			c->head_done = 1;
			c->head_len = (size_t)r;
			sample_head(c, now);
			c->body_left = c->head.content_length;
			http_chunked_init(&c->ch);
			memmove(c->in, c->in + r, c->in_len - (size_t)r);
			c->in_len -= (size_t)r;
			if (c->head.framing == HTTP_BODY_NONE) {
				conn_done(c, now);
				return;
			}
		}
		/* consume body bytes */
		size_t pos = 0;
		int complete = 0;
		if (c->head.framing == HTTP_BODY_LENGTH) {
			size_t take = c->in_len < c->body_left ? c->in_len : (size_t)c->body_left;
			if (take && g.mode == M_OPEN)
				first_token(c, now);
			c->body_left -= take;
			pos = take;
			complete = c->body_left == 0;
		} else if (c->head.framing == HTTP_BODY_CHUNKED) {
			while (pos < c->in_len && !http_chunked_done(&c->ch)) {
				int is_data;
				ssize_t k = http_chunked_scan(&c->ch, c->in + pos, c->in_len - pos,
							      &is_data);
				if (k < 0) {
					conn_fail(c);
					return;
				}
				if (is_data && k > 0 && g.mode == M_OPEN) {
					first_token(c, now);
					stream_gaps(c, c->in + pos, (size_t)k, now);
				}
				if (is_data && g.mode == M_SSE) {
					if (c->ev_cap - c->ev_len < (size_t)k) {
						c->ev_cap = c->ev_len + (size_t)k + 4096;
						c->ev = realloc(c->ev, c->ev_cap);
					}
					memcpy(c->ev + c->ev_len, c->in + pos, (size_t)k);
					c->ev_len += (size_t)k;
				}
				pos += (size_t)k;
			}
			complete = http_chunked_done(&c->ch);
			if (g.mode == M_SSE)
				sse_events(c, now);
		} else {
			pos = c->in_len;
			if (pos && g.mode == M_OPEN)
				first_token(c, now);
		}
		memmove(c->in, c->in + pos, c->in_len - pos);
		c->in_len -= pos;
		if (complete) {
			conn_done(c, now);
			return;
		}
	}
}

static void conn_on_io(struct loop_io *io, unsigned events)
{
	struct conn *c = container_of(io, struct conn, io);
	if (c->connecting && (events & (LOOP_WRITE | LOOP_HUP))) {
		c->connecting = 0;
		if (sock_error(io->fd) < 0) {
			conn_fail(c);
			return;
		}
	}
	if (c->connecting)
		return;
	if (events & LOOP_WRITE && c->sent < c->req_len && c->busy) {
		conn_send(c);
		return; /* conn_send may have freed c; the next edge brings the response */
	}
	if (events & (LOOP_READ | LOOP_HUP))
		conn_read(c);
}

static struct conn *conn_new(unsigned target)
{
	int fd = sock_connect(&g.addr[target]);
	if (fd < 0)
		return NULL;
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return NULL;
	}
	c->io.fd = fd;
	c->target = target;
	c->io.fn = conn_on_io;
	c->connecting = 1;
	if (loop_io_add(g.loop, &c->io) < 0) {
		close(fd);
		free(c);
		return NULL;
	}
	g.open_conns++;
	return c;
}

/* Start one request, due at <due_ns>, on an idle connection to its target or a new one. */
static void start_request(uint64_t due_ns)
{
	unsigned t = g.ntargets > 1 && g.next_i ? (unsigned)((g.next_i - 1) % g.ntargets) : 0;
	struct conn *c = g.idle[t];
	g.target_sent[t]++;
	if (g.mode == M_OPEN)
		g.sec_sent[second_of(due_ns)]++;
	if (c) {
		g.idle[t] = c->next_idle;
	} else if (g.open_conns >= g.max_conns || !(c = conn_new(t))) {
		g.no_conn++;
		g.errors += g.mode != M_OPEN || !in_warmup(due_ns);
		g.finished_streams++;
		return;
	}
	c->busy = 1;
	c->sent = 0;
	unsigned k = 0;
	if (g.nreqs > 1) {
		g.pick ^= g.pick << 13; /* xorshift64: uniform enough, and reproducible */
		g.pick ^= g.pick >> 7;
		g.pick ^= g.pick << 17;
		k = (unsigned)(g.pick % g.nreqs);
	}
	if (g.nbodies) { /* --bodies: request i carries line i */
		size_t i = (size_t)(g.next_i - 1);
		c->body = g.body[i];
		c->body_len = g.body_len[i];
		char rid[40] = "";
		if (g.samples)
			snprintf(rid, sizeof(rid), "X-Request-Id: lg-%zu\r\n", i);
		int n = snprintf(c->reqhead, sizeof(c->reqhead),
				 "POST %s HTTP/1.1\r\nHost: bench\r\n%sContent-Type: "
				 "application/json\r\nContent-Length: %zu\r\n\r\n",
				 g.path, rid, c->body_len);
		c->idx = i;
		if (g.samples)
			g.samples[i] = (struct sample){.due_ns = due_ns,
						       .start_ns = clock_now_ns(),
						       .target = t,
						       .sim_wait_ms = -1,
						       .sim_service_ms = -1,
						       .cached = -1,
						       .prompt = -1};
		c->req = c->reqhead;
		c->req_len = (size_t)n;
	} else {
		c->req = g.reqs[k];
		c->req_len = g.req_lens[k];
	}
	c->due_ns = due_ns;
	c->start_ns = clock_now_ns();
	c->got_token = 0;
	c->ev_len = 0;
	c->ev_nl = 0;
	c->events = 0;
	g.outstanding++;
	if (!c->connecting)
		conn_send(c);
}

/*
 * The open-loop clock: start every request that is due, then sleep until the next one.
 * After the last, the same timer becomes the deadline for stragglers.
 */
static void on_tick(struct loop_timer *t)
{
	if (g.done_sending) {
		loop_stop(g.loop); /* stragglers ran out of time; they count as errors */
		return;
	}
	uint64_t now = clock_now_ns();
	uint64_t end_ns = g.start_ns + (uint64_t)(g.duration * 1e9);
	double interval = 1e9 / g.rate;
	for (;;) {
		int last = g.nbodies && g.next_i >= g.nbodies;
		double at = g.at && !last ? g.at[g.next_i] * 1e9 : (double)g.next_i * interval;
		uint64_t due = g.start_ns + (uint64_t)at;
		if (due >= end_ns || last) {
			g.done_sending = 1;
			loop_timer_set(g.loop, t, loop_now(g.loop) + g.timeout_ns / 1000000);
			maybe_finish();
			return;
		}
		if (due > now) {
			loop_timer_set(g.loop, t, due / 1000000 + 1);
			return;
		}
		g.next_i++;
		g.warm_sent += in_warmup(due);
		start_request(due);
	}
}

static void on_deadline(struct loop_timer *t)
{
	(void)t;
	loop_stop(g.loop);
}

/*
 * --bodies: read FILE whole, one JSON body per line (empty lines skipped); the lines stay
 * where they are, each ended by a NUL instead of its newline. The measurement arrays get
 * room for every request up front, so nothing grows while sending.
 */
static int load_bodies(const char *path)
{
	FILE *f = fopen(path, "rb");
	long size;
	if (!f || fseek(f, 0, SEEK_END) < 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
		perror(path);
		if (f)
			fclose(f);
		return -1;
	}
	g.bodies = malloc((size_t)size + 1);
	size_t lines = 1;
	if (!g.bodies || fread(g.bodies, 1, (size_t)size, f) != (size_t)size) {
		perror(path);
		fclose(f);
		return -1;
	}
	fclose(f);
	g.bodies[size] = '\n';
	for (long i = 0; i < size; i++)
		lines += g.bodies[i] == '\n';
	g.body = calloc(lines, sizeof(*g.body));
	g.body_len = calloc(lines, sizeof(*g.body_len));
	g.lat = malloc(lines * sizeof(*g.lat));
	g.ttft = malloc(lines * sizeof(*g.ttft));
	g.itl = malloc(lines * 32 * sizeof(*g.itl));
	if (!g.body || !g.body_len || !g.lat || !g.ttft || !g.itl) {
		perror("loadgen: out of memory");
		return -1;
	}
	g.caplat = g.capttft = lines;
	g.capitl = lines * 32;
	char *p = g.bodies, *end = g.bodies + size;
	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p) + 1);
		*nl = '\0';
		if (nl > p) {
			g.body[g.nbodies] = p;
			g.body_len[g.nbodies++] = (size_t)(nl - p);
		}
		p = nl + 1;
	}
	if (!g.nbodies) {
		fprintf(stderr, "%s: no bodies\n", path);
		return -1;
	}
	return 0;
}

/* --at: one due time (seconds from the start) a line, as many as the bodies, not decreasing. */
static int load_at(const char *path)
{
	FILE *f = fopen(path, "r");
	double v, prev = 0;
	if (!f) {
		perror(path);
		return -1;
	}
	g.at = malloc(g.nbodies * sizeof(*g.at));
	while (g.at && g.nat < g.nbodies && fscanf(f, "%lf", &v) == 1 && v >= prev)
		g.at[g.nat++] = prev = v;
	fclose(f);
	if (g.nat != g.nbodies) {
		fprintf(stderr, "%s: %zu due times for %zu bodies (or one decreasing)\n", path,
			g.nat, g.nbodies);
		return -1;
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: loadgen open|sse|idle --target HOST:PORT [--target HOST:PORT ...]\n"
		"  [--path P] [--body B]\n"
		"  [--rate R --duration S] [--streams N] [--conns N] [--timeout-s S]\n"
		"  [--prefixes N]  (open: each prompt is one of N long system prompts, then one\n"
		"                  of four questions)\n"
		"  [--bodies FILE] (open: request i carries line i of FILE as its body)\n"
		"  [--slo-ms MS]   (open: goodput_slo counts TTFT <= MS; default 1000)\n"
		"  [--at TIMES]    (open, with --bodies: request i is due at line i seconds)\n"
		"  [--warmup W]    (open: requests due in the first W seconds count nowhere)\n"
		"  [--samples OUT] (open, with --bodies: one line per request into OUT)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"target", required_argument, NULL, 't'},
	    {"path", required_argument, NULL, 'p'},
	    {"body", required_argument, NULL, 'b'},
	    {"rate", required_argument, NULL, 'r'},
	    {"duration", required_argument, NULL, 'd'},
	    {"streams", required_argument, NULL, 's'},
	    {"conns", required_argument, NULL, 'c'},
	    {"timeout-s", required_argument, NULL, 'T'},
	    {"prefixes", required_argument, NULL, 'P'},
	    {"bodies", required_argument, NULL, 'B'},
	    {"slo-ms", required_argument, NULL, 'L'},
	    {"at", required_argument, NULL, 'A'},
	    {"warmup", required_argument, NULL, 'W'},
	    {"samples", required_argument, NULL, 'S'},
	    {NULL, 0, NULL, 0},
	};
	const char *path = "/v1/completions", *body = "{\"prompt\":\"hi\"}", *why;
	const char *bodies = NULL, *at = NULL, *samples = NULL;
	double timeout_s = 30;
	unsigned prefixes = 0;
	g.slo_ms = 1000;
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "open"))
		g.mode = M_OPEN;
	else if (!strcmp(argv[1], "sse"))
		g.mode = M_SSE;
	else if (!strcmp(argv[1], "idle"))
		g.mode = M_IDLE;
	else
		usage();
	g.max_conns = 20000;
	int ch;
	optind = 2;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 't':
			if (g.ntargets == MAX_TARGETS ||
			    net_addr_parse(optarg, &g.addr[g.ntargets++], &why) < 0)
				usage();
			break;
		case 'p':
			path = optarg;
			break;
		case 'b':
			body = optarg;
			break;
		case 'r':
			g.rate = atof(optarg);
			break;
		case 'd':
			g.duration = atof(optarg);
			break;
		case 's':
			g.streams = (unsigned)atoi(optarg);
			break;
		case 'c':
			g.conns = (unsigned)atoi(optarg);
			break;
		case 'T':
			timeout_s = atof(optarg);
			break;
		case 'P':
			prefixes = (unsigned)atoi(optarg);
			break;
		case 'B':
			bodies = optarg;
			break;
		case 'L':
			g.slo_ms = atof(optarg);
			break;
		case 'A':
			at = optarg;
			break;
		case 'W':
			g.warm_ns = (uint64_t)(atof(optarg) * 1e9);
			break;
		case 'S':
			samples = optarg;
			break;
		default:
			usage();
		}
	}
	if (!g.ntargets)
		usage();
	if ((g.mode == M_OPEN && (g.rate <= 0 || g.duration * 1e9 <= (double)g.warm_ns)) ||
	    (g.mode == M_SSE && !g.streams) || (g.mode == M_IDLE && !g.conns))
		usage();
	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl = {1 << 20, 1 << 20};
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	g.timeout_ns = (uint64_t)(timeout_s * 1e9);
	g.path = path;
	if (bodies && (g.mode != M_OPEN || strlen(path) > 128 || load_bodies(bodies) < 0))
		usage();
	if (at && (!bodies || load_at(at) < 0))
		usage();
	if (samples && (!bodies || !(g.samples = calloc(g.nbodies, sizeof(*g.samples)))))
		usage();
	static const char *const questions[] = {"what now?", "why is that so?", "how?",
						"and what comes after that one?"};
	g.nreqs = prefixes ? prefixes * 4 : 1;
	g.pick = 0x9e3779b97f4a7c15u;
	g.reqs = calloc(g.nreqs, sizeof(*g.reqs));
	g.req_lens = calloc(g.nreqs, sizeof(*g.req_lens));
	for (unsigned k = 0; k < g.nreqs; k++) {
		char pbody[1024];
		if (prefixes) /* a long system prompt, different per k, then the same question */
			snprintf(
			    pbody, sizeof(pbody),
			    "{\"prompt\":\"System prompt %u. You are a careful assistant for "
			    "team %u; answer briefly, cite sources, never guess, and keep the "
			    "house style of team %u in every reply you write for them, whatever "
			    "the question and however it is phrased. Their documents follow, "
			    "and they are long: the first 256 bytes of every prompt of team %u "
			    "are the same. Question: %s\"}",
			    k / 4, k / 4, k / 4, k / 4, questions[k % 4]);
		const char *b = prefixes ? pbody : body;
		size_t cap = strlen(path) + strlen(b) + 256;
		g.reqs[k] = malloc(cap);
		if (g.mode == M_IDLE)
			g.req_lens[k] = (size_t)snprintf(
			    g.reqs[k], cap, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", path);
		else
			g.req_lens[k] =
			    (size_t)snprintf(g.reqs[k], cap,
					     "POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: "
					     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
					     path, strlen(b), b);
	}
	g.nsec = (size_t)g.duration + 1;
	g.sec_sent = calloc(g.nsec, sizeof(*g.sec_sent));
	g.sec_good = calloc(g.nsec, sizeof(*g.sec_good));
	if (!g.sec_sent || !g.sec_good || loop_create(&g.loop) < 0)
		return 1;
	g.start_ns = clock_now_ns();
	struct loop_timer deadline = {.fn = on_deadline};
	if (g.mode == M_OPEN) {
		g.tick.fn = on_tick;
		loop_timer_set(g.loop, &g.tick, loop_now(g.loop));
	} else {
		unsigned n = g.mode == M_SSE ? g.streams : g.conns;
		for (unsigned i = 0; i < n; i++)
			start_request(clock_now_ns());
		loop_timer_set(g.loop, &deadline, loop_now(g.loop) + (uint64_t)(timeout_s * 1000));
		maybe_finish();
	}
	loop_run(g.loop);
	double elapsed = (double)(clock_now_ns() - g.start_ns) / 1e9;
	g.errors += g.outstanding; /* still unanswered at the deadline */

	printf("{\"mode\":\"%s\",\"ok\":%llu,\"errors\":%llu,\"no_conn\":%llu,\"timeouts\":%u,",
	       argv[1], (unsigned long long)g.ok, (unsigned long long)g.errors,
	       (unsigned long long)g.no_conn, g.outstanding);
	printf("\"status\":{\"2xx\":%llu,\"3xx\":%llu,\"4xx\":%llu,\"5xx\":%llu},",
	       (unsigned long long)g.status[2], (unsigned long long)g.status[3],
	       (unsigned long long)g.status[4], (unsigned long long)g.status[5]);
	double span = g.duration; /* of sending */
	if (g.nbodies && !g.at && (double)g.nbodies / g.rate < span)
		span = (double)g.nbodies / g.rate;
	span -= (double)g.warm_ns / 1e9;
	uint64_t sent = g.next_i - g.warm_sent;
	if (g.mode == M_OPEN)
		printf("\"rate\":%.1f,\"duration_s\":%.3f,\"sent\":%llu,\"warmup_sent\":%llu,"
		       "\"goodput\":%.2f,",
		       g.rate, span, (unsigned long long)sent, (unsigned long long)g.warm_sent,
		       (double)g.ok / span);
	printf("\"elapsed_s\":%.3f,", elapsed);
	if (g.mode == M_SSE) {
		print_dist("ttft_ms", g.ttft, g.nttft);
		printf(",");
		print_dist("token_delay_ms", g.lat, g.nlat);
	} else {
		print_dist("latency_ms", g.lat, g.nlat);
	}
	if (g.mode == M_OPEN) {
		/* every request sent has a TTFT; one that never got a first byte counts as 1e9 */
		size_t never = sent > g.nttft ? (size_t)sent - g.nttft : 0;
		for (size_t i = 0; i < never; i++)
			record(&g.ttft, &g.nttft, &g.capttft, 1e9);
		printf(",\"no_first_token\":%zu,\"slo_ms\":%.0f,\"good_slo\":%llu,"
		       "\"goodput_slo\":%.2f,",
		       never, g.slo_ms, (unsigned long long)g.good_slo, (double)g.good_slo / span);
		print_dist("ttft_ms", g.ttft, g.nttft);
		printf(",");
		print_dist("itl_ms", g.itl, g.nitl);
		for (int k = 0; k < 2; k++) {
			const uint64_t *v = k ? g.sec_good : g.sec_sent;
			printf(k ? "],\"good_slo\":[" : ",\"per_second\":{\"sent\":[");
			for (size_t i = 0; i < g.nsec; i++)
				printf("%s%llu", i ? "," : "", (unsigned long long)v[i]);
		}
		printf("]}");
	}
	if (g.ntargets > 1) {
		printf(",\"per_target\":[");
		for (unsigned t = 0; t < g.ntargets; t++)
			printf("%s{\"sent\":%llu,\"ok\":%llu}", t ? "," : "",
			       (unsigned long long)g.target_sent[t],
			       (unsigned long long)g.target_ok[t]);
		printf("]");
	}
	printf("}\n");
	fflush(stdout);
	if (samples && samples_write(samples) < 0)
		return 1;
	if (g.mode == M_IDLE) {
		/* hold the connections until told to let go */
		char b[64];
		while (read(STDIN_FILENO, b, sizeof(b)) > 0)
			;
	}
	while (g.held) {
		struct conn *c = g.held;
		g.held = c->next_idle;
		conn_free(c);
	}
	for (unsigned t = 0; t < g.ntargets; t++)
		while (g.idle[t]) {
			struct conn *c = g.idle[t];
			g.idle[t] = c->next_idle;
			conn_free(c);
		}
	loop_destroy(g.loop);
	free(g.lat);
	free(g.ttft);
	free(g.itl);
	free(g.samples);
	for (unsigned k = 0; k < g.nreqs; k++)
		free(g.reqs[k]);
	free(g.reqs);
	free(g.req_lens);
	free(g.bodies);
	free(g.at);
	free(g.sec_sent);
	free(g.sec_good);
	free(g.body);
	free(g.body_len);
	return 0;
}
