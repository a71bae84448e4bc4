/*
 * fuzz_config.c - libFuzzer target: any YAML either loads into a config or yields a
 * positioned error message; never a crash or a leak. The input may use ${FUZZ_A} (set),
 * ${FUZZ_EMPTY} (empty), ${FUZZ_REF} (a value that looks like a reference), any unset name,
 * $$, durations and sizes; `include:` is refused (only a config read from a file includes),
 * so no input reads a file.
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
	static int env_set;
	if (!env_set) {
		setenv("FUZZ_A", "127.0.0.1:9001", 1);
		setenv("FUZZ_EMPTY", "", 1);
		setenv("FUZZ_REF", "${FUZZ_A}$$", 1);
		env_set = 1;
	}
	if (conf_load_string("fuzz.yaml", (const char *)data, size, &c, &err) == 0)
		conf_free(c);
	else if (strncmp(err.msg, "fuzz.yaml", 9) != 0)
		abort();
	return 0;
}
