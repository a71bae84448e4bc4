/*
 * uninew.h - the code points newer than libpcre2's Unicode (14.0) that Hugging Face's
 * tokenizers counts as letters, numbers, marks, punctuation or symbols (and as each kind of
 * letter: Lu, Ll, Lt, Lm, Lo), as the inside of a PCRE2 character class
 * ("\x{31350}-\x{323AF}..."), one per class. Generated from the
 * reference itself by scripts/gen-tok-unicode.py (uninew.c); pretok.c adds each to its
 * \p{...} in a tokenizer's patterns.
 */
#ifndef ACCELNET_TOK_UNINEW_H
#define ACCELNET_TOK_UNINEW_H

extern const char uninew_L[], uninew_N[], uninew_M[], uninew_P[], uninew_S[];
extern const char uninew_Lu[], uninew_Ll[], uninew_Lt[], uninew_Lm[], uninew_Lo[];

#endif
