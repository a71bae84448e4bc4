/*
 * hex.h - the value of one hexadecimal digit, for the parsers that read hex (chunk sizes,
 * JSON \u escapes, percent-encoding, key digests): one definition, either case accepted.
 */
#ifndef ACCELNET_CORE_HEX_H
#define ACCELNET_CORE_HEX_H

/* 0..15 for '0'-'9', 'a'-'f', 'A'-'F'; -1 for any other byte (a char or an unsigned char). */
static inline int hex_value(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

#endif
