/*
 * cmd_tokenize.c - `accelnet tokenize --tokenizer FILE [--chat] [--lines] TEXT|-`: the token
 * ids of a text as accelnet computes them (src/tok/), in decimal separated by spaces, for
 * users to check a model's tokenizer and for the conformance tests. `-` reads the text from
 * standard input, all of it, as bytes. --lines reads many texts from the input instead, one
 * per line, each a JSON string literal ("a\nb"), and prints one line of ids for each, so that
 * one process loads the tokenizer once for thousands of texts. --chat: each text is an
 * OpenAI `messages` array, rendered by the chat format of the tokenizer_config.json beside
 * FILE (tok/chat.h) with the generation prompt, then encoded without the post-processor's ids
 * (or an object {"messages": [...], "tools": [...]}, a request's tools with its messages).
 * --model NAME --config FILE takes the tokenizer and chat format the config's models: gives
 * NAME, loaded as the proxy loads them, so the ids are those the router computes.
 * --chat --text prints the rendered prompt itself, as a JSON string on one line, instead of
 * its ids: the tokenizer.json is then not loaded (only the tokenizer_config.json beside it is
 * read), so a chat format is checked even where its tokenizer is not supported.
 * --decode --lines goes the other way: each line a list of ids, printed as the JSON string of
 * their text, decoded one id at a time as the gRPC engine mode streams it (tok/detok.h).
 */
#include "cli/cli.h"

#include "conf/conf.h"
#include "conf/schema_tokmodel.h"
#include "tok/chat.h"
#include "tok/detok.h"
#include "tok/tokspm.h"
#include "tok/tokmodel.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void ids_print(const uint32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(i ? " %u" : "%u", ids[i]);
	putchar('\n');
}

static int read_all_stdin(char **out, size_t *n)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		size_t k = fread(buf + len, 1, cap - len, stdin);
		len += k;
		if (k == 0)
			break;
	}
	if (ferror(stdin)) {
		free(buf);
		return -EIO;
	}
	*out = buf;
	*n = len;
	return 0;
}

static const char *encode_error(int r)
{
	return r == -EILSEQ	 ? "not UTF-8"
	       : r == -EOVERFLOW ? "the pre-tokenizer's regex gave up on it"
				 : strerror(-r);
}

/* What tokenize prints for one text (a messages array with a chat format): 0, or 1/2
 * after saying why on stderr. */
static int tokenize_one(struct tok_scratch *s, const struct chat *chat, struct chat_text *ct,
			int text_only, const char *text, size_t n, const char *what)
{
	const uint32_t *ids;
	size_t nids;
	char err[256];
	int r;
	if (chat) {
		json_error_t je;
		json_t *m = json_loadb(text, n, JSON_ALLOW_NUL, &je);
		if (!m) {
			fprintf(stderr, "accelnet tokenize: %s: not a messages array (%s)\n", what,
				je.text);
			return 2;
		}
		/* a messages array, or an object with "messages" and "tools" */
		r = json_is_object(m)
			? chat_render(chat, json_object_get(m, "messages"),
				      json_object_get(m, "tools"), ct, err, sizeof(err))
			: chat_render(chat, m, NULL, ct, err, sizeof(err));
		json_decref(m);
		if (r) {
			fprintf(stderr, "accelnet tokenize: %s: %s\n", what,
				r == -EINVAL ? err : strerror(-r));
			return r == -EINVAL ? 2 : 1;
		}
		text = ct->p;
		n = ct->len;
		if (text_only) {
			json_t *js = json_stringn_nocheck(text ? text : "", n);
			char *dump = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
			json_decref(js);
			if (!dump) {
				fprintf(stderr, "accelnet tokenize: %s: %s\n", what,
					strerror(ENOMEM));
				return 1;
			}
			puts(dump);
			free(dump);
			return 0;
		}
	}
	r = tok_encode(s, text, n, !chat, &ids, &nids);
	if (r) {
		fprintf(stderr, "accelnet tokenize: %s: %s\n", what, encode_error(r));
		return 1;
	}
	ids_print(ids, nids);
	return 0;
}

static int tokenize_lines(struct tok_scratch *s, const struct chat *chat, struct chat_text *ct,
			  int text_only)
{
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc = 0;
	while ((len = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		json_error_t je;
		json_t *j = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
		if (!json_is_string(j)) {
			fprintf(stderr, "accelnet tokenize: line %zu: not a JSON string (%s)\n",
				lineno, j ? "another JSON value" : je.text);
			json_decref(j);
			rc = 2;
			break;
		}
		char what[40];
		snprintf(what, sizeof(what), "line %zu", lineno);
		rc = tokenize_one(s, chat, ct, text_only, json_string_value(j),
				  json_string_length(j), what);
		json_decref(j);
		if (rc)
			break;
	}
	free(line);
	return rc;
}

/* --decode --lines: each line's ids (decimal, space-separated) as a JSON string of their
 * text. 0, or 2 for a line that is not ids. */
static int decode_lines(const struct tok *t)
{
	char *line = NULL, *piece = NULL, *text = NULL;
	size_t cap = 0, lineno = 0, pcap = 0, tcap = 0;
	ssize_t len;
	int rc = 0;
	while (!rc && (len = getline(&line, &cap, stdin)) >= 0) {
		struct detok d = {0};
		size_t tn = 0;
		char *p = line, *end;
		lineno++;
		for (;;) {
			while (*p == ' ')
				p++;
			if (*p == '\n' || !*p)
				break;
			unsigned long id = strtoul(p, &end, 10);
			if (end == p || id > UINT32_MAX || (*end && *end != ' ' && *end != '\n')) {
				fprintf(stderr, "accelnet tokenize: line %zu: not token ids\n",
					lineno);
				rc = 2;
				break;
			}
			p = end;
			size_t room = detok_room(t, (uint32_t)id) + DETOK_END_MAX;
			if (room > pcap && !(piece = realloc(piece, pcap = room)))
				abort();
			long k = detok_piece(t, &d, (uint32_t)id, piece, pcap);
			if (k < 0 ||
			    (tn + (size_t)k + DETOK_END_MAX > tcap &&
			     !(text = realloc(text, tcap = 2 * (tn + (size_t)k + DETOK_END_MAX)))))
				abort(); /* the room was asked for; out of memory */
			memcpy(text + tn, piece, (size_t)k);
			tn += (size_t)k;
		}
		if (rc)
			break;
		if (tn + DETOK_END_MAX > tcap && !(text = realloc(text, tcap = tn + DETOK_END_MAX)))
			abort();
		tn += detok_end(t, &d, text + tn, DETOK_END_MAX);
		json_t *j = json_stringn(text ? text : "", tn);
		char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
		if (!out)
			abort(); /* detok gives whole UTF-8 */
		puts(out);
		free(out);
		json_decref(j);
	}
	free(line);
	free(piece);
	free(text);
	return rc;
}

int cmd_tokenize(int argc, char **argv)
{
	static const struct option opts[] = {{"tokenizer", required_argument, NULL, 't'},
					     {"lines", no_argument, NULL, 'L'},
					     {"chat", no_argument, NULL, 'C'},
					     {"text", no_argument, NULL, 'T'},
					     {"decode", no_argument, NULL, 'D'},
					     {"model", required_argument, NULL, 'm'},
					     {"config", required_argument, NULL, 'c'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *file = NULL, *model = NULL, *config = NULL;
	int lines = 0, chat_on = 0, text_only = 0, decode = 0, c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+t:c:h", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			file = optarg;
			break;
		case 'm':
			model = optarg;
			break;
		case 'c':
			config = optarg;
			break;
		case 'L':
			lines = 1;
			break;
		case 'C':
			chat_on = 1;
			break;
		case 'T':
			text_only = 1;
			break;
		case 'D':
			decode = 1;
			break;
		case 'h':
			cli_usage(stdout, "tokenize");
			return 0;
		default:
			cli_usage(stderr, "tokenize");
			return 2;
		}
	}
	int nargs = argc - optind;
	const char *usage =
	    !file == !model		    ? "--tokenizer FILE or --model NAME is required"
	    : !model != !config		    ? "--model NAME goes with --config FILE"
	    : text_only && !chat_on	    ? "--text goes with --chat"
	    : decode && (!lines || chat_on) ? "--decode goes with --lines, without --chat"
	    : (lines ? nargs == 0 || (nargs == 1 && !strcmp(argv[optind], "-")) : nargs == 1)
		? NULL
		: "one TEXT, or -, is required";
	if (usage) {
		fprintf(stderr, "accelnet tokenize: %s\n", usage);
		cli_usage(stderr, "tokenize");
		return 2;
	}
	struct tok t = {0};
	struct tok_scratch s = {0};
	struct conf *conf = NULL;
	const struct tok *tp = &t;
	const struct chat *chat = NULL;
	char err[512];
	int rc = 0, r;
	char *text = NULL, *cfg = NULL;
	struct chat own_chat;
	struct chat_text ct = {0};
	if (model) {
		struct conf_error cerr;
		if (conf_load_file(config, &conf, &cerr) < 0) {
			fprintf(stderr, "%s\n", cerr.msg);
			return 2;
		}
		const struct conf_tokmodel *m = conf_tokmodel_find(conf, model, strlen(model));
		if (!m || (chat_on && !m->tm->has_chat)) {
			fprintf(stderr, "accelnet tokenize: %s: %s%s%s\n", config,
				!m ? "models: names no such model"
				   : "models: this model has no chat template",
				m && m->tm->chat_skipped[0] ? ": " : "",
				m ? m->tm->chat_skipped : "");
			conf_free(conf);
			return 2;
		}
		tp = &m->tm->tok;
		chat = chat_on ? &m->tm->chat : NULL;
	} else if (!text_only && (r = tok_load(file, &t, err, sizeof(err)))) {
		fprintf(stderr, "accelnet tokenize: %s\n", err);
		return r == -EINVAL ? 2 : 1;
	}
	if (!text_only && (r = tok_scratch_init(&s, tp))) {
		fprintf(stderr, "accelnet tokenize: %s\n", strerror(-r));
		rc = 1;
		goto fail;
	}
	if (chat_on && !model) {
		const char *slash = strrchr(file, '/');
		int dir = slash ? (int)(slash - file + 1) : 0;
		if (asprintf(&cfg, "%.*stokenizer_config.json", dir, file) < 0) {
			cfg = NULL;
			rc = 1;
			goto fail;
		}
		if ((r = chat_load(cfg, NULL, &own_chat, err, sizeof(err)))) {
			fprintf(stderr, "accelnet tokenize: %s\n", err);
			rc = r == -EINVAL || r == -ENOTSUP ? 2 : 1;
			goto fail;
		}
		chat = &own_chat;
	}
	if (decode) {
		rc = decode_lines(tp);
		goto fail;
	}
	if (lines) {
		rc = tokenize_lines(&s, chat, &ct, text_only);
		goto fail;
	}
	size_t n;
	if (!strcmp(argv[optind], "-")) {
		if ((r = read_all_stdin(&text, &n))) {
			fprintf(stderr, "accelnet tokenize: standard input: %s\n", strerror(-r));
			rc = 1;
			goto fail;
		}
	} else {
		n = strlen(argv[optind]);
	}
	rc = tokenize_one(&s, chat, &ct, text_only, text ? text : argv[optind], n, "the text");
fail:
	free(text);
	free(cfg);
	chat_text_free(&ct);
	tok_scratch_free(&s);
	if (conf)
		conf_free(conf);
	else
		tok_free(&t);
	if (fflush(stdout) && !rc)
		rc = 1;
	return rc;
}
