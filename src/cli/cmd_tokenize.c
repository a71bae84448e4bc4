/*
 * cmd_tokenize.c - `accelnet tokenize --tokenizer FILE [--lines] TEXT|-`: the token ids of a
 * text as accelnet computes them (src/tok/), in decimal separated by spaces, for users to
 * check a model's tokenizer and for the conformance tests. `-` reads the text from standard
 * input, all of it, as bytes. --lines reads many texts from the input instead, one per line,
 * each a JSON string literal ("a\nb"), and prints one line of ids for each, so that one
 * process loads the tokenizer once for thousands of texts.
 */
#include "cli/cli.h"

#include "tok/tokjson.h"

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

static int tokenize_lines(struct tok_scratch *s)
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
		const uint32_t *ids;
		size_t n;
		int r = tok_encode(s, json_string_value(j), json_string_length(j), &ids, &n);
		json_decref(j);
		if (r) {
			fprintf(stderr, "accelnet tokenize: line %zu: %s\n", lineno,
				encode_error(r));
			rc = 1;
			break;
		}
		ids_print(ids, n);
	}
	free(line);
	return rc;
}

int cmd_tokenize(int argc, char **argv)
{
	static const struct option opts[] = {{"tokenizer", required_argument, NULL, 't'},
					     {"lines", no_argument, NULL, 'L'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *file = NULL;
	int lines = 0, c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+t:h", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			file = optarg;
			break;
		case 'L':
			lines = 1;
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
	if (!file ||
	    !(lines ? nargs == 0 || (nargs == 1 && !strcmp(argv[optind], "-")) : nargs == 1)) {
		fprintf(stderr, "accelnet tokenize: %s\n",
			!file ? "--tokenizer FILE is required" : "one TEXT, or -, is required");
		cli_usage(stderr, "tokenize");
		return 2;
	}
	struct tok t;
	struct tok_scratch s;
	char err[512];
	int r = tokjson_load(file, &t, err, sizeof(err));
	if (r) {
		fprintf(stderr, "accelnet tokenize: %s\n", err);
		return r == -EINVAL ? 2 : 1;
	}
	int rc = 0;
	char *text = NULL;
	if ((r = tok_scratch_init(&s, &t))) {
		fprintf(stderr, "accelnet tokenize: %s\n", strerror(-r));
		rc = 1;
		goto fail;
	}
	if (lines) {
		rc = tokenize_lines(&s);
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
	const uint32_t *ids;
	size_t nids;
	r = tok_encode(&s, text ? text : argv[optind], n, &ids, &nids);
	if (r) {
		fprintf(stderr, "accelnet tokenize: the text: %s\n", encode_error(r));
		rc = 1;
		goto fail;
	}
	ids_print(ids, nids);
fail:
	free(text);
	tok_scratch_free(&s);
	tok_free(&t);
	if (fflush(stdout) && !rc)
		rc = 1;
	return rc;
}
