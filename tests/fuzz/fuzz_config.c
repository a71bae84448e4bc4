/*
 * fuzz_config.c - libFuzzer target: any YAML either loads into a config or yields a
 * positioned error message; never a crash or a leak.
 */
#include "conf/conf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf *c;
	struct conf_error err;
	if (conf_load_string("fuzz.yaml", (const char *)data, size, &c, &err) == 0)
		conf_free(c);
	else if (strncmp(err.msg, "fuzz.yaml", 9) != 0)
		abort();
	return 0;
}
