/*
 * cmd_xfer.c - `accelnet xfer serve|send|get|bcast`: arguments (one flag table per
 * subcommand), the progress bar and the JSON summary, over the library API of
 * include/accelnet/xfer.h.
 */
#include "accelnet/xfer.h"
#include "cli/cli.h"

#include "core/check.h"
#include "net/numa.h"
#include "obs/json.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	/* atomic: --metrics' thread reads it too (an int's atomic store is signal-safe) */
	__atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
}

/*
 * The flags of each subcommand, from one table each: the parser (getopt_long, long options
 * only), the bounds of numbers, their defaults (the library's own constants) and the usage
 * text are all read from it, so a flag is added in one line.
 */
/* FLAG_CHOICE: one of the words of <arg> ("auto|off"), stored as its index (an int) */
enum flag_kind { FLAG_STR, FLAG_UINT, FLAG_ON, FLAG_CHOICE };
enum { USAGE_REQUIRED = 1 }; /* shown without brackets */

struct flag {
	const char *name;
	enum flag_kind kind;
	size_t off;	   /* where the value lands in the subcommand's arguments */
	unsigned max, def; /* FLAG_UINT: accepted 1..max; the default when not given (shown) */
	const char *arg;   /* the value's name in the usage text */
	unsigned style;	   /* USAGE_* */
	int implies_tls;   /* send: the flag also turns TLS on */
};

struct push_args {
	struct xfer_send_opts o;
	const char *to;
	int json, quiet;
};

#define SERVE(field) offsetof(struct xfer_serve_opts, field)
#define PUSH(field) offsetof(struct push_args, field)

static const struct flag serve_flags[] = {
    {"listen", FLAG_STR, SERVE(listen), 0, 0, "ADDR[,ADDR...]", USAGE_REQUIRED, 0},
    {"dir", FLAG_STR, SERVE(dir), 0, 0, "DIR", USAGE_REQUIRED, 0},
    {"token", FLAG_STR, SERVE(token_file), 0, 0, "FILE", 0, 0},
    {"tls-ca", FLAG_STR, SERVE(tls_ca), 0, 0, "FILE", 0, 0},
    {"insecure", FLAG_ON, SERVE(insecure), 0, 0, NULL, 0, 0},
    {"metrics", FLAG_STR, SERVE(metrics), 0, 0, "ADDR", 0, 0},
    {"tls-cert", FLAG_STR, SERVE(tls_cert), 0, 0, "FILE", 0, 0},
    {"tls-key", FLAG_STR, SERVE(tls_key), 0, 0, "FILE", 0, 0},
    {"keep-parts-hours", FLAG_UINT, SERVE(keep_parts_hours), 100000, XFER_SERVE_KEEP_PARTS_HOURS,
     "H", 0, 0},
    {"relay-to", FLAG_STR, SERVE(relay_to), 0, 0, "CIDR[,CIDR...]", 0, 0},
    {"max-conns", FLAG_UINT, SERVE(max_conns), 1000000, XFER_SERVE_MAX_CONNS, "N", 0, 0},
    {"max-conns-per-addr", FLAG_UINT, SERVE(max_conns_per_addr), 1000000,
     XFER_SERVE_MAX_CONNS_PER_ADDR, "N", 0, 0},
    {"max-files", FLAG_UINT, SERVE(max_files), 100000000, XFER_SERVE_MAX_FILES, "N", 0, 0},
    {"handshake-ms", FLAG_UINT, SERVE(handshake_ms), 3600000, XFER_SERVE_HANDSHAKE_MS, "MS", 0, 0},
    {"frame-ms", FLAG_UINT, SERVE(frame_ms), 3600000, XFER_SERVE_FRAME_MS, "MS", 0, 0},
    {"min-rate-kib", FLAG_UINT, SERVE(min_rate_kib), 1048576, XFER_SERVE_MIN_RATE_KIB, "N", 0, 0},
    {"numa", FLAG_CHOICE, SERVE(numa_off), 0, 0, "auto|off", 0, 0},
};

static const struct flag push_flags[] = {
    {"streams", FLAG_UINT, PUSH(o.streams), 64, XFER_SEND_STREAMS, "N", 0, 0},
    {"to", FLAG_STR, PUSH(to), 0, 0, "NAME", 0, 0},
    {"from", FLAG_STR, PUSH(o.local), 0, 0, "ADDR[,ADDR...]", 0, 0},
    {"token", FLAG_STR, PUSH(o.token_file), 0, 0, "FILE", 0, 0},
    {"chunk-kib", FLAG_UINT, PUSH(o.chunk_kib), 65536, XFER_SEND_CHUNK_KIB, "N", 0, 0},
    {"stall-ms", FLAG_UINT, PUSH(o.stall_ms), 3600000, XFER_SEND_STALL_MS, "MS", 0, 0},
    {"json", FLAG_ON, PUSH(json), 0, 0, NULL, 0, 0},
    {"quiet", FLAG_ON, PUSH(quiet), 0, 0, NULL, 0, 0},
    {"tls", FLAG_ON, PUSH(o.tls), 0, 0, NULL, 0, 0},
    {"tls-ca", FLAG_STR, PUSH(o.tls_ca), 0, 0, "FILE", 0, 1},
    {"tls-cert", FLAG_STR, PUSH(o.tls_cert), 0, 0, "FILE", 0, 1},
    {"tls-key", FLAG_STR, PUSH(o.tls_key), 0, 0, "FILE", 0, 1},
    {"tls-insecure", FLAG_ON, PUSH(o.tls_insecure), 0, 0, NULL, 0, 1},
    {"numa", FLAG_CHOICE, PUSH(o.numa_off), 0, 0, "auto|off", 0, 0},
};

#define NFLAGS(t) (sizeof(t) / sizeof((t)[0]))
#define FLAG_CODE_BASE 256 /* getopt_long's value for flag i: long options only */

static const char trust_text[] =
    "trust: serve refuses to start without --token, --tls-ca or an explicit --insecure. With\n"
    "  --token both ends prove they hold it (HMAC over random challenges; it never travels).\n"
    "  Without --tls the server is not authenticated by a certificate, and the data is neither\n"
    "  encrypted nor protected from someone on the path; without --tls and --token nothing is\n"
    "  authenticated. get accepts from a server only the names asked for (and what lies\n"
    "  beneath them), beneath --to, with modes masked by 0777 and the umask.\n";

/* "  accelnet xfer CMD HEAD" and each flag of <t>, wrapped before 100 columns. */
static void usage_line(FILE *f, const char *head, const struct flag *t, size_t n)
{
	int col = fprintf(f, "  accelnet xfer %s", head);
	for (size_t i = 0; i < n; i++) {
		char one[96];
		const struct flag *fl = &t[i];
		int req = fl->style & USAGE_REQUIRED;
		int len = snprintf(one, sizeof(one), "%s--%s%s%s", req ? "" : "[", fl->name,
				   fl->arg ? " " : "", fl->arg ? fl->arg : "");
		if (fl->kind == FLAG_UINT && fl->def)
			len += snprintf(one + len, sizeof(one) - (size_t)len, " (%u)", fl->def);
		if (!req)
			len += snprintf(one + len, sizeof(one) - (size_t)len, "]");
		if (col + 1 + len > 99)
			col = fprintf(f, "\n       ");
		col += fprintf(f, " %s", one);
	}
	fputc('\n', f);
}

static void print_usage(FILE *f)
{
	fprintf(f, "usage:\n");
	usage_line(f, "serve", serve_flags, NFLAGS(serve_flags));
	usage_line(f, "send PATH... HOST:PORT[,HOST:PORT...]", push_flags, NFLAGS(push_flags));
	fprintf(f,
		"  accelnet xfer get HOST:PORT[,HOST:PORT...] NAME... [--to DIR] [same options as "
		"send]\n"
		"  accelnet xfer bcast PATH HOST:PORT[,...] HOST:PORT[,...] ... [same options as "
		"send]\n"
		"%s",
		trust_text);
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "accelnet xfer: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	print_usage(stderr);
	va_end(ap);
	return 2;
}

/* The index of <word> among the '|'-separated words of <choices>, or -EINVAL. */
static int parse_choice(const char *word, const char *choices)
{
	size_t n = strlen(word);
	int i = 0;
	for (const char *p = choices;; i++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len == n && !strncmp(p, word, n))
			return i;
		if (!bar)
			return -EINVAL;
		p = bar + 1;
	}
}

static int parse_uint(const char *s, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0 || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

enum { HELP_SHOWN = -1 }; /* parse_flags: --help or -h printed the usage; exit 0 */

/*
 * Parse the flags of <t> from argv[1..] into <args>; the positionals, in order, into <pos>
 * (at most <maxpos>, their count in *npos). <tls>, when not NULL, is set by a flag that
 * implies TLS. 0, the exit status of a usage error (already printed), or HELP_SHOWN.
 */
static int parse_flags(int argc, char **argv, const char *cmd, const struct flag *t, size_t n,
		       void *args, int *tls, const char **pos, unsigned maxpos, unsigned *npos)
{
	struct option opts[24];
	ASSERT(n + 1 < sizeof(opts) / sizeof(opts[0]));
	for (size_t i = 0; i < n; i++)
		opts[i] = (struct option){t[i].name,
					  t[i].kind == FLAG_ON ? no_argument : required_argument,
					  NULL, FLAG_CODE_BASE + (int)i};
	opts[n] = (struct option){"help", no_argument, NULL, 'h'};
	opts[n + 1] = (struct option){0};
	*npos = 0;
	optind = 1;
	opterr = 0;
	for (;;) {
		int code = getopt_long(argc, argv, "-h", opts, NULL);
		if (code == -1)
			break;
		if (code == 'h') {
			print_usage(stdout);
			return HELP_SHOWN;
		}
		if (code == 1) { /* a positional, in its place ("-" included) */
			if (*npos == maxpos)
				return bad_usage("too many arguments");
			pos[(*npos)++] = optarg;
			continue;
		}
		if (code < FLAG_CODE_BASE || code >= FLAG_CODE_BASE + (int)n)
			return bad_usage("%s: unknown or incomplete option '%s'", cmd,
					 argv[optind - 1]);
		const struct flag *fl = &t[code - FLAG_CODE_BASE];
		char *field = (char *)args + fl->off;
		if (fl->kind == FLAG_STR)
			*(const char **)(void *)field = optarg;
		else if (fl->kind == FLAG_ON)
			*(int *)(void *)field = 1;
		else if (fl->kind == FLAG_CHOICE) {
			int v = parse_choice(optarg, fl->arg);
			if (v < 0)
				return bad_usage("--%s takes one of %s", fl->name, fl->arg);
			*(int *)(void *)field = v;
		} else if (parse_uint(optarg, fl->max, (unsigned *)(void *)field))
			return bad_usage("--%s needs a number from 1 to %u", fl->name, fl->max);
		if (fl->implies_tls && tls)
			*tls = 1;
	}
	return 0;
}

static void serve_ready(const int *ports, unsigned n, void *arg)
{
	(void)arg;
	fprintf(stderr, "accelnet xfer serve: listening, ports");
	for (unsigned i = 0; i < n; i++)
		fprintf(stderr, " %d", ports[i]);
	fprintf(stderr, "\n");
}

static int cmd_serve(int argc, char **argv)
{
	struct xfer_serve_opts o = {.stop = &stop_flag, .ready = serve_ready};
	const char *pos[1];
	unsigned npos;
	int rc = parse_flags(argc, argv, "serve", serve_flags, NFLAGS(serve_flags), &o, NULL, pos,
			     0, &npos);
	if (rc)
		return rc == HELP_SHOWN ? 0 : rc;
	if (!o.listen || !o.dir)
		return bad_usage("serve needs --listen and --dir");
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return xfer_serve(&o) ? 1 : 0;
}

static void human(double bytes, char *out, size_t len)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (bytes >= 1024 && u < 4)
		bytes /= 1024, u++;
	snprintf(out, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

/* A one-line bar on stderr: share done, bytes, rate per link, ETA. While files are still being
 * listed the total is not known: the bar says so, with what was listed so far and no share or
 * ETA. */
static void progress_bar(const struct xfer_report *r, void *arg)
{
	(void)arg;
	if (r->listing) {
		char done[32], listed[32];
		double gbps = 0;
		for (unsigned i = 0; i < r->nlinks; i++)
			gbps += r->links[i].gbps;
		human((double)(r->bytes_acked + r->bytes_skipped), done, sizeof(done));
		human((double)r->bytes_total, listed, sizeof(listed));
		fprintf(stderr,
			"\r[listing: %u files, %s so far; total not known yet] %s done %.2f "
			"Gbit/s\033[K",
			r->files, listed, done, gbps);
		return;
	}
	uint64_t want = r->bytes_total - r->bytes_skipped;
	double frac = want ? (double)r->bytes_acked / (double)want : 1;
	double gbps = 0;
	for (unsigned i = 0; i < r->nlinks; i++)
		gbps += r->links[i].gbps;
	char bar[21], done[32], total[32];
	int fill = (int)(frac * 20);
	for (int i = 0; i < 20; i++)
		bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
	bar[20] = 0;
	human((double)(r->bytes_acked + r->bytes_skipped), done, sizeof(done));
	human((double)r->bytes_total, total, sizeof(total));
	fprintf(stderr, "\r[%s] %3.0f%% %s/%s %.2f Gbit/s", bar, frac * 100, done, total, gbps);
	for (unsigned i = 0; i < r->nlinks; i++)
		fprintf(stderr, " | %s %.2f%s", r->links[i].remote, r->links[i].gbps,
			r->links[i].up ? "" : " down");
	if (gbps > 0)
		fprintf(stderr, " | ETA %.0fs", (double)(want - r->bytes_acked) * 8 / (gbps * 1e9));
	fprintf(stderr, "\033[K");
}

/* ", \"cpus\": [0, 1, 2]" from a cpulist, or null when there is none. */
static void print_cpus(const char *list)
{
	cpu_set_t set;
	printf(", \"cpus\": ");
	if (!list[0] || numa_parse_cpulist(list, strlen(list), &set)) {
		printf("null");
		return;
	}
	const char *sep = "[";
	for (int c = 0; c < NUMA_CPUS_MAX; c++)
		if (CPU_ISSET(c, &set)) {
			printf("%s%d", sep, c);
			sep = ", ";
		}
	printf("]");
}

static void print_json(const struct xfer_report *r, int rc)
{
	double gbps = r->seconds > 0 ? (double)r->bytes_acked * 8 / r->seconds / 1e9 : 0;
	printf(
	    "{\"ok\": %s, \"files\": %u, \"bytes\": %llu, \"bytes_skipped\": %llu, "
	    "\"bytes_sent\": %llu, "
	    "\"bytes_acked\": %llu, \"bytes_dup\": %llu, \"seconds\": %.3f, "
	    "\"gbit_per_s\": %.3f, \"chunks\": %u, "
	    "\"chunks_resent\": %u, \"chunks_dup\": %u, \"chunks_corrupt\": %u, "
	    "\"zerocopy_bytes\": %llu, "
	    "\"zerocopy_copied_bytes\": %llu, \"manifest_parts\": %u, \"listing_seconds\": %.3f, "
	    "\"links\": [",
	    rc ? "false" : "true", r->files, (unsigned long long)r->bytes_total,
	    (unsigned long long)r->bytes_skipped, (unsigned long long)r->bytes_sent,
	    (unsigned long long)r->bytes_acked, (unsigned long long)r->bytes_dup, r->seconds, gbps,
	    r->chunks, r->chunks_resent, r->chunks_dup, r->chunks_bad,
	    (unsigned long long)r->zc_bytes, (unsigned long long)r->zc_copied_bytes, r->parts,
	    r->listing_seconds);
	for (unsigned i = 0; i < r->nlinks; i++) {
		const struct xfer_link_report *l = &r->links[i];
		printf("%s{\"remote\": ", i ? ", " : "");
		json_write_string(stdout, l->remote);
		printf(", \"local\": ");
		json_write_string(stdout, l->local);
		printf(", \"bytes\": %llu, \"gbit_per_s\": %.3f, \"streams_up\": %u, "
		       "\"streams_lost\": %u, \"bytes_sent\": %llu, \"chunks_dup\": %u, "
		       "\"interface\": ",
		       (unsigned long long)l->bytes, l->gbps, l->up, l->failed,
		       (unsigned long long)l->sent, l->dups);
		if (l->iface[0])
			json_write_string(stdout, l->iface);
		else
			printf("null");
		if (l->numa_node >= 0)
			printf(", \"numa_node\": %d", l->numa_node);
		else
			printf(", \"numa_node\": null");
		print_cpus(l->cpus);
		printf("}");
	}
	printf("], \"error\": ");
	json_write_string(stdout, r->error);
	printf("}\n");
}

enum push_kind { PUSH_SEND, PUSH_BCAST, PUSH_GET };

static int report_result(const struct xfer_report *r, int rc, int json, int quiet);

/* send, bcast and get: positionals are paths then destinations (send: the last one only;
 * bcast: the path first; get: the server first, then names). */
static int cmd_push(int argc, char **argv, enum push_kind kind)
{
	struct push_args args = {0};
	struct xfer_send_opts *o = &args.o;
	const char *pos[256];
	unsigned npos;
	int rc = parse_flags(argc, argv, argv[0], push_flags, NFLAGS(push_flags), &args, &o->tls,
			     pos, 256, &npos);
	if (rc)
		return rc == HELP_SHOWN ? 0 : rc;
	const char *to = args.to;
	int json = args.json, quiet = args.quiet;
	unsigned npaths;
	int bcast = kind == PUSH_BCAST;
	if (kind == PUSH_GET) {
		if (npos < 2)
			return bad_usage("get needs HOST:PORT and at least one NAME");
		o->remote = pos[0];
		if (!quiet && isatty(2))
			fprintf(stderr, "accelnet xfer: getting from %s...\n", pos[0]);
		signal(SIGPIPE, SIG_IGN);
		struct xfer_report r;
		rc = xfer_get(o, pos + 1, npos - 1, to ? to : ".", &r);
		return report_result(&r, rc, json, quiet);
	}
	if (bcast) {
		if (npos < 2)
			return bad_usage("bcast needs PATH and at least one HOST:PORT");
		npaths = 1;
		o->remote = pos[1];
		o->bcast = pos + 2;
		o->nbcast = npos - 2;
	} else {
		if (npos < 2)
			return bad_usage("send needs PATH... and HOST:PORT");
		npaths = npos - 1;
		o->remote = pos[npos - 1];
	}
	if (!quiet && isatty(2))
		o->progress = progress_bar;
	signal(SIGPIPE, SIG_IGN);
	struct xfer_report r;
	/* the tree is walked while it is sent: data flows before the walk ends */
	rc = xfer_send_paths(o, pos, npaths, to, &r);
	if (o->progress)
		fprintf(stderr, "\r\033[K");
	return report_result(&r, rc, json, quiet);
}

/* <s> on stderr without control characters: an error may quote a peer's text, and a peer
 * could otherwise write escapes and lines of its own to the user's terminal. */
static void print_clean(const char *s)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f ? '?' : *s, stderr);
}

static int report_result(const struct xfer_report *r, int rc, int json, int quiet)
{
	if (json)
		print_json(r, rc);
	if (rc) {
		fprintf(stderr, "accelnet xfer: transfer failed: ");
		print_clean(r->error);
		fputc('\n', stderr);
		return 1;
	}
	if (!quiet && !json) {
		char total[32], sent[32];
		human((double)r->bytes_total, total, sizeof(total));
		human((double)r->bytes_sent, sent, sizeof(sent));
		fprintf(stderr, "accelnet xfer: %u file(s), %s in %.2f s (%.2f Gbit/s)", r->files,
			total, r->seconds,
			r->seconds > 0 ? (double)r->bytes_acked * 8 / r->seconds / 1e9 : 0);
		if (r->bytes_sent) { /* a sender's view; get reports what it received */
			char dup[32];
			human((double)r->bytes_dup, dup, sizeof(dup));
			fprintf(stderr, ", %s sent, %s of it duplicate", sent, dup);
		}
		for (unsigned i = 0; i < r->nlinks; i++)
			fprintf(stderr, "%s %s%s%s %.2f Gbit/s", i ? "," : ";", r->links[i].remote,
				r->links[i].iface[0] ? " via " : "", r->links[i].iface,
				r->links[i].gbps);
		fprintf(stderr, "\n");
	}
	return 0;
}

int cmd_xfer(int argc, char **argv)
{
	if (argc < 2)
		return bad_usage("missing subcommand");
	if (!strcmp(argv[1], "serve"))
		return cmd_serve(argc - 1, argv + 1);
	if (!strcmp(argv[1], "send"))
		return cmd_push(argc - 1, argv + 1, PUSH_SEND);
	if (!strcmp(argv[1], "bcast"))
		return cmd_push(argc - 1, argv + 1, PUSH_BCAST);
	if (!strcmp(argv[1], "get"))
		return cmd_push(argc - 1, argv + 1, PUSH_GET);
	if (cli_is_help(argv[1])) {
		print_usage(stdout);
		return 0;
	}
	return bad_usage("unknown subcommand '%s'", argv[1]);
}
