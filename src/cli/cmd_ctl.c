/*
 * cmd_ctl.c - `accelnet ctl`: the runtime admin API (docs/operations.md, "Runtime admin
 * API") from the command line: list backends, add and remove them, drain, enable and
 * disable them, change weights and concurrency caps, maintenance, cache purges, reload.
 *
 * Each command is one call over one connection (cli/adminc.h) to --admin, else
 * $ACCELNET_ADMIN, else the demo's 127.0.0.1:8399 (adminc_from_env), with the token of --token-file
 * (else $ACCELNET_ADMIN_TOKEN_FILE) as a bearer token; it speaks plain HTTP, for a loopback or an
 * admin network. The answer is printed as a short table or line (--json: as it came), an
 * error as the endpoint's own message. The answer comes from another process: only its
 * printable ASCII reaches the terminal. Exit 0: done; 1: refused, unreachable, or done but
 * not kept in admin.state_file; 2: usage.
 */
#include "cli/adminc.h"
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET_MAX 600

struct ctl {
	struct adminc ac;
	int json;	  /* --json: print the answer as it came */
	const char *name; /* "ctl", or "reload" when `accelnet reload` runs it */
};

/* <s> with every byte outside printable ASCII as '?', into out[0..max). */
static const char *printable(const char *s, char *out, size_t max)
{
	size_t i = 0;
	for (; s && s[i] && i + 1 < max; i++)
		out[i] = s[i] >= ' ' && s[i] <= '~' ? s[i] : '?';
	out[i] = 0;
	return s ? out : "-";
}

static const char *str(const json_t *o, const char *key, char *out, size_t max)
{
	return printable(json_string_value(json_object_get(o, key)), out, max);
}

static long long num(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* Append <s> to <out> as one path segment: percent-encoded but for unreserved bytes, ':'. */
static int put_segment(char *out, size_t cap, const char *s)
{
	size_t n = strlen(out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			    (*p >= '0' && *p <= '9') || strchr("-._~:", *p);
		if (n + 4 >= cap)
			return -1;
		n += (size_t)(plain ? snprintf(out + n, cap - n, "%c", *p)
				    : snprintf(out + n, cap - n, "%%%02X", *p));
	}
	return 0;
}

/* "/api/pools/POOL/backends[/ADDRESS[/ACTION]]" into out[TARGET_MAX]. */
static int backend_target(char *out, const char *pool, const char *addr, const char *action)
{
	snprintf(out, TARGET_MAX, "/api/pools/");
	if (put_segment(out, TARGET_MAX, pool) < 0)
		return -1;
	strncat(out, "/backends", TARGET_MAX - strlen(out) - 1);
	if (addr) {
		strncat(out, "/", TARGET_MAX - strlen(out) - 1);
		if (put_segment(out, TARGET_MAX, addr) < 0)
			return -1;
	}
	if (action && strlen(out) + strlen(action) + 2 < TARGET_MAX) {
		strcat(out, "/");
		strcat(out, action);
	}
	return 0;
}

static void print_backend_row(const json_t *b)
{
	char addr[72], src[16], state[16];
	printf("  %-28s %-7s %-9s %6lld %8lld %-3s %8lld\n", str(b, "address", addr, sizeof(addr)),
	       str(b, "source", src, sizeof(src)), str(b, "state", state, sizeof(state)),
	       num(b, "weight"), num(b, "max_concurrency"),
	       json_is_true(json_object_get(b, "up")) ? "yes" : "no", num(b, "inflight"));
}

static void print_backends(const json_t *doc)
{
	const json_t *pools = json_object_get(doc, "pools"), *p, *b;
	const json_t *m = json_object_get(doc, "maintenance");
	size_t i, j;
	char name[72], bal[40];
	if (json_is_true(json_object_get(m, "on")))
		printf("MAINTENANCE ON: new requests get 503 (Retry-After: %lld)\n\n",
		       num(m, "retry_after_s"));
	json_array_foreach(pools, i, p)
	{
		printf("POOL %s (%s)  spare slots free: %lld of %lld\n",
		       str(p, "name", name, sizeof(name)), str(p, "balance", bal, sizeof(bal)),
		       num(p, "free_slots"), num(p, "spare_backends"));
		printf("  %-28s %-7s %-9s %6s %8s %-3s %8s\n", "ADDRESS", "SOURCE", "STATE",
		       "WEIGHT", "MAXCONC", "UP", "INFLIGHT");
		json_array_foreach(json_object_get(p, "backends"), j, b) print_backend_row(b);
		if (i + 1 < json_array_size(pools))
			printf("\n");
	}
}

/* Print a 2xx answer <doc> of <what>. 0, or 1 when the change was not persisted. */
static int print_answer(const struct ctl *c, const char *what, const json_t *doc)
{
	char msg[640];
	const json_t *b = json_object_get(doc, "backend"), *m = json_object_get(doc, "maintenance");
	if (!strcmp(what, "backends")) {
		print_backends(doc);
		return 0;
	}
	if (b) {
		char addr[72], state[16];
		printf("%s: %s: state %s, weight %lld, max_concurrency %lld, inflight %lld\n", what,
		       str(b, "address", addr, sizeof(addr)), str(b, "state", state, sizeof(state)),
		       num(b, "weight"), num(b, "max_concurrency"), num(b, "inflight"));
	} else if (m) {
		if (json_is_true(json_object_get(m, "on")))
			printf("maintenance on: new requests get 503 (Retry-After: %lld)\n",
			       num(m, "retry_after_s"));
		else
			printf("maintenance off\n");
	} else if (json_object_get(doc, "purged")) {
		printf("purged %lld\n", num(doc, "purged"));
	} else if (json_is_true(json_object_get(doc, "reloaded"))) {
		printf("reloaded\n");
	}
	if (json_is_false(json_object_get(doc, "persisted"))) {
		fprintf(stderr, "accelnet %s: warning: the change holds but is not kept: %s\n",
			c->name, str(doc, "persist_error", msg, sizeof(msg)));
		return 1;
	}
	return 0;
}

/* One call; prints the answer. The exit status. */
static int ctl_call(struct ctl *c, const char *what, const char *method, const char *target,
		    json_t *req)
{
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL, *out = NULL, msg[640];
	size_t len = 0;
	int status = 0, rc = 1;
	json_decref(req);
	if (req && !body) {
		fprintf(stderr, "accelnet %s: out of memory\n", c->name);
		return 1;
	}
	if (adminc_call(&c->ac, method, target, body, body ? strlen(body) : 0, &status, &out,
			&len) < 0) {
		fprintf(stderr, "accelnet %s: %s\n", c->name, c->ac.err);
		goto out;
	}
	json_t *doc = json_loadb(out, len, 0, NULL);
	if (status == 401) {
		fprintf(stderr, "accelnet %s: %s:%s refused: 401 unauthorized (%s)\n", c->name,
			c->ac.host, c->ac.port,
			c->ac.token[0] ? "wrong token"
				       : "give --token-file or $ACCELNET_ADMIN_TOKEN_FILE");
	} else if (status < 200 || status > 299) {
		const char *e = json_string_value(json_object_get(doc, "error"));
		fprintf(stderr, "accelnet %s: %s: HTTP %d: %s\n", c->name, what, status,
			printable(e ? e : out, msg, sizeof(msg)));
	} else if (!json_is_object(doc)) {
		fprintf(stderr, "accelnet %s: %s:%s: the answer is not a JSON object\n", c->name,
			c->ac.host, c->ac.port);
	} else if (c->json) {
		fwrite(out, 1, len, stdout);
		rc = json_is_false(json_object_get(doc, "persisted"));
	} else {
		rc = print_answer(c, what, doc);
	}
	json_decref(doc);
out:
	free(out);
	free(body);
	return rc;
}

static int usage_error(const struct ctl *c, const char *msg)
{
	fprintf(stderr, "accelnet %s: %s\n", c->name, msg);
	cli_usage(stderr, c->name);
	return 2;
}

/* "N" as an integer in lo..hi into *out; -1 when it is not. */
static int parse_uint(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* add POOL ADDRESS [--weight N] [--max-concurrency N] */
static int ctl_add(struct ctl *c, int argc, char **argv)
{
	char target[TARGET_MAX];
	long v;
	if (argc < 3)
		return usage_error(c, "add takes POOL ADDRESS [--weight N] [--max-concurrency N]");
	json_t *req = json_pack("{s:s}", "address", argv[2]);
	for (int i = 3; i < argc; i += 2) {
		const char *key = !strcmp(argv[i], "--weight")		  ? "weight"
				  : !strcmp(argv[i], "--max-concurrency") ? "max_concurrency"
									  : NULL;
		if (!key || i + 1 >= argc || parse_uint(argv[i + 1], 0, 1000000, &v) < 0) {
			json_decref(req);
			return usage_error(c,
					   "add: --weight N and --max-concurrency N take numbers");
		}
		json_object_set_new(req, key, json_integer(v));
	}
	if (backend_target(target, argv[1], NULL, NULL) < 0) {
		json_decref(req);
		return usage_error(c, "pool name too long");
	}
	return ctl_call(c, "add", "POST", target, req);
}

/* remove|drain|enable|disable POOL ADDRESS; weight|max-concurrency POOL ADDRESS N */
static int ctl_backend(struct ctl *c, int argc, char **argv)
{
	char target[TARGET_MAX];
	const char *cmd = argv[0];
	int setting = !strcmp(cmd, "weight") || !strcmp(cmd, "max-concurrency");
	long v = 0;
	if (argc != (setting ? 4 : 3))
		return usage_error(c, setting ? "weight and max-concurrency take POOL ADDRESS N"
					      : "this command takes POOL ADDRESS");
	if (setting && parse_uint(argv[3], 0, 1000000, &v) < 0)
		return usage_error(c, "N must be a number");
	if (backend_target(target, argv[1], argv[2], setting ? NULL : cmd) < 0)
		return usage_error(c, "pool or address too long");
	if (!setting)
		return ctl_call(c, cmd, "POST", target, NULL);
	return ctl_call(c, cmd, "PATCH", target,
			json_pack("{s:I}", !strcmp(cmd, "weight") ? "weight" : "max_concurrency",
				  (json_int_t)v));
}

/* maintenance on [--retry-after S] | off | status */
static int ctl_maintenance(struct ctl *c, int argc, char **argv)
{
	long v = 30;
	if (argc == 2 && !strcmp(argv[1], "status"))
		return ctl_call(c, "maintenance", "GET", "/api/maintenance", NULL);
	if (argc == 2 && !strcmp(argv[1], "off"))
		return ctl_call(c, "maintenance", "POST", "/api/maintenance",
				json_pack("{s:b}", "on", 0));
	if (argc >= 2 && !strcmp(argv[1], "on") &&
	    (argc == 2 || (argc == 4 && !strcmp(argv[2], "--retry-after") &&
			   !parse_uint(argv[3], 1, 86400, &v))))
		return ctl_call(c, "maintenance", "POST", "/api/maintenance",
				json_pack("{s:b,s:I}", "on", 1, "retry_after_s", (json_int_t)v));
	return usage_error(c, "maintenance takes on [--retry-after SECONDS], off or status");
}

/* purge uri URL | prefix URL | tag TAG | all */
static int ctl_purge(struct ctl *c, int argc, char **argv)
{
	json_t *req = NULL;
	if (argc == 2 && !strcmp(argv[1], "all"))
		req = json_pack("{s:b}", "all", 1);
	else if (argc == 3 &&
		 (!strcmp(argv[1], "uri") || !strcmp(argv[1], "prefix") || !strcmp(argv[1], "tag")))
		req = json_pack("{s:s}", argv[1], argv[2]);
	else
		return usage_error(c, "purge takes uri URL, prefix URL, tag TAG or all");
	return ctl_call(c, "purge", "POST", "/api/cache/purge", req);
}

/* `accelnet <name>`: ctl, or reload (argv ending in "reload"). */
static int ctl_main(int argc, char **argv, const char *name)
{
	static const struct option opts[] = {
	    {"admin", required_argument, NULL, 'a'},
	    {"token-file", required_argument, NULL, 't'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {0, 0, 0, 0},
	};
	struct ctl c = {.name = name};
	const char *admin = NULL, *token_file = NULL;
	int o, rc;
	opterr = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			admin = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'j':
			c.json = 1;
			break;
		case 'h':
			cli_usage(stdout, "ctl");
			return 0;
		default:
			return usage_error(&c, "unknown option");
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		return usage_error(&c, "give a COMMAND");
	if (cli_is_help(argv[0])) {
		cli_usage(stdout, "ctl");
		return 0;
	}
	adminc_from_env(&admin, &token_file);
	if (adminc_parse_addr(&c.ac, admin) < 0) {
		fprintf(stderr, "accelnet %s: --admin takes HOST:PORT, not '%s'\n", name, admin);
		return 2;
	}
	if (token_file && adminc_load_token(&c.ac, token_file) < 0) {
		fprintf(stderr, "accelnet %s: %s\n", name, c.ac.err);
		return 2;
	}
	const char *cmd = argv[0];
	if (!strcmp(cmd, "backends") && argc == 1)
		rc = ctl_call(&c, "backends", "GET", "/api/backends", NULL);
	else if (!strcmp(cmd, "add"))
		rc = ctl_add(&c, argc, argv);
	else if (!strcmp(cmd, "remove") || !strcmp(cmd, "drain") || !strcmp(cmd, "enable") ||
		 !strcmp(cmd, "disable") || !strcmp(cmd, "weight") ||
		 !strcmp(cmd, "max-concurrency"))
		rc = ctl_backend(&c, argc, argv);
	else if (!strcmp(cmd, "maintenance"))
		rc = ctl_maintenance(&c, argc, argv);
	else if (!strcmp(cmd, "purge"))
		rc = ctl_purge(&c, argc, argv);
	else if (!strcmp(cmd, "reload") && argc == 1)
		rc = ctl_call(&c, "reload", "POST", "/api/reload", NULL);
	else
		rc = usage_error(&c, "unknown command, or wrong arguments");
	adminc_wipe(&c.ac);
	return rc;
}

int cmd_ctl(int argc, char **argv)
{
	return ctl_main(argc, argv, "ctl");
}

int cmd_reload(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (cli_is_help(argv[i])) {
			cli_usage(stdout, "reload");
			return 0;
		}
	char **v = calloc((size_t)argc + 2, sizeof(*v));
	if (!v) {
		fprintf(stderr, "accelnet reload: out of memory\n");
		return 1;
	}
	memcpy(v, argv, (size_t)argc * sizeof(*v));
	v[argc] = "reload";
	int rc = ctl_main(argc + 1, v, "reload");
	free(v);
	return rc;
}
