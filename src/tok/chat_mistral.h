/*
 * chat_mistral.h - Mistral Nemo's chat format (chat_mistral.c): <messages> and <tools> rendered
 * with the template's BOS <bos> and EOS <eos>, as chat_render() renders.
 */
#ifndef ACCELNET_TOK_CHAT_MISTRAL_H
#define ACCELNET_TOK_CHAT_MISTRAL_H

#include "tok/chattext.h"

#include <jansson.h>
#include <stddef.h>

int chat_render_mistral(const char *bos, const char *eos, json_t *messages, json_t *tools,
			struct chat_text *out, char *err, size_t errlen);

#endif
