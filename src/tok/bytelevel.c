/*
 * bytelevel.c - the byte-level alphabet (bytelevel.h). A byte is printable when it is in
 * '!'..'~', U+00A1..U+00AC or U+00AE..U+00FF: those stand for themselves; the others (control
 * bytes, space, DEL, U+00A0, the soft hyphen) are numbered in byte order from U+0100. Both
 * directions are table-driven, the tables built once on first use.
 */
#include "tok/bytelevel.h"

#include <pthread.h>

static uint16_t byte_cp[256];	  /* byte -> code point */
static int16_t cp_byte[256 + 68]; /* code point -> byte, or -1 */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static int printable(unsigned b)
{
	return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
}

static void tables_build(void)
{
	unsigned next = 256;
	for (unsigned i = 0; i < sizeof(cp_byte) / sizeof(cp_byte[0]); i++)
		cp_byte[i] = -1;
	for (unsigned b = 0; b < 256; b++) {
		byte_cp[b] = printable(b) ? b : next++;
		cp_byte[byte_cp[b]] = (int16_t)b;
	}
}

long bytelevel_decode(const char *s, size_t n, uint8_t *out)
{
	pthread_once(&tables_once, tables_build);
	const uint8_t *p = (const uint8_t *)s, *end = p + n;
	long k = 0;
	while (p < end) {
		unsigned cp;
		if (p[0] < 0x80) {
			cp = *p++;
		} else if ((p[0] & 0xe0) == 0xc0 && end - p >= 2 && (p[1] & 0xc0) == 0x80) {
			cp = (p[0] & 0x1fu) << 6 | (p[1] & 0x3fu);
			p += 2;
			if (cp < 0x80)
				return -1;
		} else {
			return -1; /* every character of the alphabet is below U+0800 */
		}
		if (cp >= sizeof(cp_byte) / sizeof(cp_byte[0]) || cp_byte[cp] < 0)
			return -1;
		out[k++] = (uint8_t)cp_byte[cp];
	}
	return k;
}

size_t bytelevel_encode_byte(uint8_t b, char out[2])
{
	pthread_once(&tables_once, tables_build);
	unsigned cp = byte_cp[b];
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	out[0] = (char)(0xc0 | cp >> 6);
	out[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}
