/*
 * chat_deepseek.h - DeepSeek V3's chat format (chat_deepseek.c): <messages> rendered with the
 * template's BOS <bos>, as chat_render() renders.
 */
#ifndef ACCELNET_TOK_CHAT_DEEPSEEK_H
#define ACCELNET_TOK_CHAT_DEEPSEEK_H

#include "tok/chattext.h"

#include <jansson.h>
#include <stddef.h>

int chat_render_deepseek(const char *bos, json_t *messages, struct chat_text *out, char *err,
			 size_t errlen);

#endif
