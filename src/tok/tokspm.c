/*
 * tokspm.c - a tokenizer file of either kind (tokspm.h): the first byte that is not white
 * space says JSON or not; a SentencePiece model's pieces become the struct tok's vocabulary
 * and named tokens, which decoding reads (detok.h), while encoding goes to the library.
 */
#include "tok/tokspm.h"

#include "tok/spm.h"
#include "tok/tokjson.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char unk_surface[] = " \xe2\x81\x87 "; /* " ⁇ ", libsentencepiece's */

/* The model's pieces as the vocabulary and named tokens of *t. */
static int pieces_read(struct tok *t, const struct spm_model *m)
{
	size_t n = spm_vocab_size(m), bytes = 0, len, named_bytes = 0, nnamed = 0;
	int kind, r;
	if (n > UINT32_MAX / 2)
		return -ENOMEM;
	for (uint32_t id = 0; id < n; id++) {
		spm_piece(m, id, &len, &kind);
		bytes += len;
		if (kind == SPM_UNKNOWN || kind == SPM_CONTROL) {
			nnamed++;
			named_bytes += kind == SPM_UNKNOWN ? sizeof(unk_surface) - 1 : len;
		}
	}
	if ((r = vocab_init(&t->vocab, (uint32_t)n, bytes, 0)))
		return r;
	t->named = calloc(nnamed ? nnamed : 1, sizeof(*t->named));
	t->named_text = malloc(named_bytes ? named_bytes : 1);
	if (!t->named || !t->named_text)
		return -ENOMEM;
	for (uint32_t id = 0; id < n; id++) {
		const char *p = spm_piece(m, id, &len, &kind);
		if (kind == SPM_UNKNOWN || kind == SPM_CONTROL) {
			const char *text = kind == SPM_UNKNOWN ? unk_surface : p;
			size_t tl = kind == SPM_UNKNOWN ? sizeof(unk_surface) - 1 : len;
			memcpy(t->named_text + t->named_len, text, tl);
			t->named[t->nnamed++] =
			    (struct tok_named){id, (uint32_t)t->named_len, (uint32_t)tl,
					       kind == SPM_CONTROL, kind == SPM_UNKNOWN};
			t->named_len += tl;
		}
		/* pieces are unique in a model; one that is not (or empty) decodes to nothing */
		if (len && (r = vocab_add(&t->vocab, (const uint8_t *)p, len, id)) && r != -EEXIST)
			return r;
	}
	return 0;
}

static int spm_read(const char *path, struct tok *t, char *err, size_t errlen)
{
	char why[300];
	struct spm_model *m = NULL;
	memset(t, 0, sizeof(*t));
	int r = spm_load(path, &m, why, sizeof(why));
	if (r) {
		snprintf(err, errlen,
			 "%s: neither a tokenizer.json (it does not start with '{') nor a "
			 "SentencePiece model (libsentencepiece: %s)",
			 path, why);
		return r;
	}
	int dummy, remove;
	t->spm = m;
	t->chars = 1;
	if ((r = spm_normalizer_flags(m, &dummy, &remove))) {
		snprintf(err, errlen, "%s: libsentencepiece cannot encode \"a\" with it", path);
		tok_free(t);
		memset(t, 0, sizeof(*t));
		return r;
	}
	/* the library cuts the first space of the decoded text only where its normalizer put
	 * one there or would have cut it: of each piece until text comes when it removes extra
	 * spaces, else of the first piece only (Llama 2's model keeps spaces, Gemma's has no
	 * dummy prefix either) */
	t->dec = (struct tok_decoder){.nreplace = 1,
				      .byte_fallback = 1,
				      .by_char = 1,
				      .fused = 1,
				      .strip = dummy || remove,
				      .strip_each = remove};
	memcpy(t->dec.replace[0].from, "\xe2\x96\x81", 3); /* "▁" */
	memcpy(t->dec.replace[0].to, " ", 1);
	t->dec.replace[0].nfrom = 3;
	t->dec.replace[0].nto = 1;
	int bos = spm_bos_id(m);
	if (bos >= 0)
		t->prefix[t->nprefix++] = (uint32_t)bos;
	if ((r = pieces_read(t, m))) {
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		tok_free(t);
		memset(t, 0, sizeof(*t));
	}
	return r;
}

int tok_load(const char *path, struct tok *t, char *err, size_t errlen)
{
	/* not blocking on a FIFO, and only a regular file: libsentencepiece throws on a
	 * directory and would read a device without end */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	char buf[4096], c = 0;
	ssize_t n;
	memset(t, 0, sizeof(*t));
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	while (S_ISREG(st.st_mode) && !c && (n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n && !c; i++)
			if (buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\n' && buf[i] != '\r')
				c = buf[i];
	close(fd);
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EINVAL;
	}
	if (c == '{')
		return tokjson_load(path, t, err, errlen);
	return spm_read(path, t, err, errlen);
}
