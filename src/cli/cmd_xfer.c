/*
 * cmd_xfer.c - `accelnet xfer serve|send|bcast`: arguments, the progress bar and the JSON
 * summary, over the library API of include/accelnet/xfer.h.
 */
#include "accelnet/xfer.h"
#include "cli/cli.h"

#include <errno.h>
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
	stop_flag = 1;
}

static const char usage_text[] =
	"usage:\n"
	"  accelnet xfer serve --listen ADDR[,ADDR...] --dir DIR (--token FILE | --tls-ca FILE | --insecure)\n"
	"        [--metrics ADDR] [--tls-cert FILE --tls-key FILE] [--keep-parts-hours H]\n"
	"        [--relay-to CIDR[,CIDR...]] [--max-conns N (1024)] [--max-conns-per-addr N (128)]\n"
	"        [--max-files N (10000)] [--handshake-ms MS (10000)]\n"
	"  accelnet xfer send PATH... HOST:PORT[,HOST:PORT...] [--streams N] [--to NAME]\n"
	"        [--from ADDR[,ADDR...]] [--token FILE] [--chunk-kib N] [--stall-ms MS] [--json] [--quiet]\n"
	"        [--tls [--tls-ca FILE] [--tls-cert FILE --tls-key FILE] | --tls-insecure]\n"
	"  accelnet xfer get HOST:PORT[,HOST:PORT...] NAME... [--to DIR] [same options as send]\n"
	"  accelnet xfer bcast PATH HOST:PORT[,...] HOST:PORT[,...] ... [same options as send]\n"
	"trust: serve refuses to start without --token, --tls-ca or an explicit --insecure. With\n"
	"  --token both ends prove they hold it (HMAC over random challenges; it never travels).\n"
	"  Without --tls the server is not authenticated by a certificate, and the data is neither\n"
	"  encrypted nor protected from someone on the path; without --tls and --token nothing is\n"
	"  authenticated. get accepts from a server only the names asked for (and what lies\n"
	"  beneath them), beneath --to, with modes masked by 0777 and the umask.\n";

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "accelnet xfer: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n%s", usage_text);
	va_end(ap);
	return 2;
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
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--listen") && v)
			o.listen = v, i++;
		else if (!strcmp(a, "--dir") && v)
			o.dir = v, i++;
		else if (!strcmp(a, "--token") && v)
			o.token_file = v, i++;
		else if (!strcmp(a, "--insecure"))
			o.insecure = 1;
		else if (!strcmp(a, "--relay-to") && v)
			o.relay_to = v, i++;
		else if (!strcmp(a, "--max-conns") && v) {
			if (parse_uint(v, 1000000, &o.max_conns))
				return bad_usage("--max-conns needs a positive number");
			i++;
		} else if (!strcmp(a, "--max-conns-per-addr") && v) {
			if (parse_uint(v, 1000000, &o.max_conns_per_addr))
				return bad_usage("--max-conns-per-addr needs a positive number");
			i++;
		} else if (!strcmp(a, "--max-files") && v) {
			if (parse_uint(v, 100000000, &o.max_files))
				return bad_usage("--max-files needs a positive number");
			i++;
		} else if (!strcmp(a, "--handshake-ms") && v) {
			if (parse_uint(v, 3600000, &o.handshake_ms))
				return bad_usage("--handshake-ms needs a positive number of milliseconds");
			i++;
		} else if (!strcmp(a, "--metrics") && v)
			o.metrics = v, i++;
		else if (!strcmp(a, "--keep-parts-hours") && v) {
			if (parse_uint(v, 100000, &o.keep_parts_hours))
				return bad_usage("--keep-parts-hours needs a positive number of hours");
			i++;
		}
		else if (!strcmp(a, "--tls-cert") && v)
			o.tls_cert = v, i++;
		else if (!strcmp(a, "--tls-key") && v)
			o.tls_key = v, i++;
		else if (!strcmp(a, "--tls-ca") && v)
			o.tls_ca = v, i++;
		else
			return bad_usage("serve: unknown or incomplete option '%s'", a);
	}
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

/* A one-line bar on stderr: share done, bytes, rate per link, ETA. */
static void progress_bar(const struct xfer_report *r, void *arg)
{
	(void)arg;
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

static void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

static void print_json(const struct xfer_report *r, int rc)
{
	double gbps = r->seconds > 0 ? (double)r->bytes_acked * 8 / r->seconds / 1e9 : 0;
	printf("{\"ok\": %s, \"files\": %u, \"bytes\": %llu, \"bytes_skipped\": %llu, \"bytes_sent\": %llu, "
	       "\"bytes_acked\": %llu, \"seconds\": %.3f, \"gbit_per_s\": %.3f, \"chunks\": %u, "
	       "\"chunks_resent\": %u, \"chunks_dup\": %u, \"chunks_corrupt\": %u, \"zerocopy_bytes\": %llu, "
	       "\"zerocopy_copied_bytes\": %llu, \"links\": [",
	       rc ? "false" : "true", r->files, (unsigned long long)r->bytes_total,
	       (unsigned long long)r->bytes_skipped, (unsigned long long)r->bytes_sent,
	       (unsigned long long)r->bytes_acked, r->seconds, gbps, r->chunks, r->chunks_resent, r->chunks_dup,
	       r->chunks_bad, (unsigned long long)r->zc_bytes, (unsigned long long)r->zc_copied_bytes);
	for (unsigned i = 0; i < r->nlinks; i++) {
		const struct xfer_link_report *l = &r->links[i];
		printf("%s{\"remote\": ", i ? ", " : "");
		json_string(stdout, l->remote);
		printf(", \"local\": ");
		json_string(stdout, l->local);
		printf(", \"bytes\": %llu, \"gbit_per_s\": %.3f, \"streams_up\": %u, \"streams_lost\": %u}",
		       (unsigned long long)l->bytes, l->gbps, l->up, l->failed);
	}
	printf("], \"error\": ");
	json_string(stdout, r->error);
	printf("}\n");
}

enum push_kind { PUSH_SEND, PUSH_BCAST, PUSH_GET };

static int report_result(const struct xfer_report *r, int rc, int json, int quiet);

/* send, bcast and get: positionals are paths then destinations (send: the last one only;
 * bcast: the path first; get: the server first, then names). */
static int cmd_push(int argc, char **argv, enum push_kind kind)
{
	struct xfer_send_opts o = {0};
	const char *pos[256], *to = NULL;
	unsigned npos = 0;
	int json = 0, quiet = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned *num = NULL, max = 0;
		if (a[0] != '-' || !a[1]) {
			if (npos == 256)
				return bad_usage("too many arguments");
			pos[npos++] = a;
			continue;
		}
		if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--quiet"))
			quiet = 1;
		else if (!strcmp(a, "--to") && v)
			to = v, i++;
		else if (!strcmp(a, "--from") && v)
			o.local = v, i++;
		else if (!strcmp(a, "--token") && v)
			o.token_file = v, i++;
		else if (!strcmp(a, "--tls"))
			o.tls = 1;
		else if (!strcmp(a, "--tls-insecure"))
			o.tls = o.tls_insecure = 1;
		else if (!strcmp(a, "--tls-ca") && v)
			o.tls = 1, o.tls_ca = v, i++;
		else if (!strcmp(a, "--tls-cert") && v)
			o.tls = 1, o.tls_cert = v, i++;
		else if (!strcmp(a, "--tls-key") && v)
			o.tls = 1, o.tls_key = v, i++;
		else if (!strcmp(a, "--streams"))
			num = &o.streams, max = 64;
		else if (!strcmp(a, "--chunk-kib"))
			num = &o.chunk_kib, max = 65536;
		else if (!strcmp(a, "--stall-ms"))
			num = &o.stall_ms, max = 3600000;
		else
			return bad_usage("unknown option '%s'", a);
		if (num) {
			if (!v || parse_uint(v, max, num))
				return bad_usage("%s needs a positive number", a);
			i++;
		}
	}
	unsigned npaths;
	int bcast = kind == PUSH_BCAST;
	if (kind == PUSH_GET) {
		if (npos < 2)
			return bad_usage("get needs HOST:PORT and at least one NAME");
		o.remote = pos[0];
		if (!quiet && isatty(2))
			fprintf(stderr, "accelnet xfer: getting from %s...\n", pos[0]);
		signal(SIGPIPE, SIG_IGN);
		struct xfer_report r;
		int rc = xfer_get(&o, pos + 1, npos - 1, to ? to : ".", &r);
		return report_result(&r, rc, json, quiet);
	}
	if (bcast) {
		if (npos < 2)
			return bad_usage("bcast needs PATH and at least one HOST:PORT");
		npaths = 1;
		o.remote = pos[1];
		o.bcast = pos + 2;
		o.nbcast = npos - 2;
	} else {
		if (npos < 2)
			return bad_usage("send needs PATH... and HOST:PORT");
		npaths = npos - 1;
		o.remote = pos[npos - 1];
	}
	struct xfer_item *items;
	unsigned nitems;
	char bad[4096];
	int rc = xfer_items_from_paths(pos, npaths, to, &items, &nitems, bad, sizeof(bad));
	if (rc) {
		fprintf(stderr, "accelnet xfer: %s: %s\n", bad, strerror(-rc));
		return 1;
	}
	if (!quiet && isatty(2))
		o.progress = progress_bar;
	signal(SIGPIPE, SIG_IGN);
	struct xfer_report r;
	rc = xfer_send(&o, items, nitems, &r);
	if (o.progress)
		fprintf(stderr, "\r\033[K");
	xfer_items_free(items, nitems);
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
		fprintf(stderr, "accelnet xfer: %u file(s), %s in %.2f s (%.2f Gbit/s)", r->files, total, r->seconds,
			r->seconds > 0 ? (double)r->bytes_acked * 8 / r->seconds / 1e9 : 0);
		if (r->bytes_sent) /* a sender's view; get reports what it received */
			fprintf(stderr, ", %s sent", sent);
		for (unsigned i = 0; i < r->nlinks; i++)
			fprintf(stderr, "%s %s %.2f Gbit/s", i ? "," : ";", r->links[i].remote, r->links[i].gbps);
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
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	return bad_usage("unknown subcommand '%s'", argv[1]);
}
