/*
 * fuzz_sni.c - libFuzzer target: the ClientHello reader (net/sni.h) on any bytes. It must
 * never crash or read past the input; a name it returns lies inside the input, is 1-255
 * bytes of letters, digits, '-', '_' and '.'; and an input it reads whole, cut one byte
 * short of its record, is "not enough yet" (-EAGAIN).
 */
#include "net/sni.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *name = NULL;
	size_t n = 0;
	int rc = net_sni_parse(data, size, &name, &n);
	if (rc != 1 && rc != 0 && rc != -EAGAIN && rc != -EINVAL)
		abort();
	if (rc == 1) {
		if ((const uint8_t *)name < data || (const uint8_t *)name + n > data + size || !n ||
		    n > 255)
			abort();
		for (size_t i = 0; i < n; i++) {
			char ch = name[i];
			if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
				abort();
		}
	}
	if (rc >= 0) { /* read whole: one byte short of its record is "not enough yet" */
		size_t whole = 5 + ((size_t)data[3] << 8 | data[4]);
		if (whole > size || net_sni_parse(data, whole - 1, &name, &n) != -EAGAIN)
			abort();
	}
	return 0;
}
