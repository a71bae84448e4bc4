/*
 * fuzz_cpulist.c - libFuzzer target: the sysfs cpulist parser (net/numa.h) on any bytes. What
 * it takes must read back as the same set once written and parsed again, and what it writes
 * (the canonical form: ranges merged) is never longer than the strict list it read.
 */
#include "net/numa.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cpu_set_t set, again;
	char text[8192];
	int rc = numa_parse_cpulist((const char *)data, size, &set);
	if (rc == 0) {
		int n = numa_format_cpulist(&set, text, sizeof(text));
		if (n < 0 || (size_t)n > size)
			abort(); /* the canonical form is never longer than a strict list */
		if (numa_parse_cpulist(text, (size_t)n, &again) || !CPU_EQUAL(&set, &again))
			abort();
	} else if (rc != -EINVAL && rc != -ERANGE) {
		abort();
	}
	return 0;
}
