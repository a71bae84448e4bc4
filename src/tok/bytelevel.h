/*
 * bytelevel.h - the byte-level alphabet of GPT-2 style BPE: each of the 256 byte values is
 * written as one printable Unicode character in a tokenizer.json (the bytes that are printable
 * Latin-1 as themselves, the 68 others as U+0100 on, in byte order), so that a vocabulary of
 * strings can name every byte sequence. accelnet keeps tokens as the raw bytes they stand for
 * and never maps the input text: it decodes the file's strings once, at load.
 */
#ifndef ACCELNET_TOK_BYTELEVEL_H
#define ACCELNET_TOK_BYTELEVEL_H

#include <stddef.h>
#include <stdint.h>

/*
 * The raw bytes the byte-level string s[0..n) stands for, written to out (room for n bytes:
 * one character of at least one byte gives one byte). Returns their count, or -1 when s holds
 * a character outside the alphabet or is not UTF-8.
 */
long bytelevel_decode(const char *s, size_t n, uint8_t *out);

/* The alphabet's character for byte b, as UTF-8 in out (1 or 2 bytes); returns the length. */
size_t bytelevel_encode_byte(uint8_t b, char out[2]);

#endif
