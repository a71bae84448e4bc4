# accelnet - a plain Makefile. `make` builds build/accelnet; `make test` runs every test;
# `make SAN=1` builds into build-san/ with AddressSanitizer and UBSan; `make fuzz` builds the
# libFuzzer targets with clang; `make bench` the load generator of bench/run.

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

CC ?= gcc
PKGS = yaml-0.1 openssl libxxhash
WARN = -Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wpointer-arith \
       -Wformat=2 -Wvla -Wundef -Werror
CFLAGS ?= $(OPT) -g
ALL_CFLAGS = -std=c17 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) -Isrc -Iinclude -MMD -MP \
	     $(shell pkg-config --cflags $(PKGS))
LDLIBS = $(shell pkg-config --libs $(PKGS)) -lpthread -lm

LIB_SRC = $(wildcard src/core/*.c src/net/*.c src/http/*.c src/policy/*.c src/conf/*.c \
	  src/proxy/*.c src/obs/*.c src/sim/*.c src/xfer/*.c)
CLI_SRC = $(wildcard src/cli/*.c)
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

all: $(BUILD)/accelnet

$(BUILD)/accelnet: $(LIB_OBJ) $(CLI_OBJ)
	@echo "  LD  $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	@$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  TEST $@"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs cmocka)

unit: $(UNIT_BIN)

test: all unit
	tests/run.sh

FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN = $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_LIB = $(filter-out src/sim/% src/proxy/% src/obs/% src/xfer/engine.c src/xfer/send.c src/xfer/serve.c,$(LIB_SRC))
fuzz: $(FUZZ_BIN)
build-fuzz/%: tests/fuzz/%.c $(FUZZ_LIB)
	@mkdir -p build-fuzz
	clang -std=c17 -D_GNU_SOURCE -g -O1 -Isrc -Iinclude -fsanitize=fuzzer,address,undefined \
		-o $@ $^ $(LDLIBS)

bench: $(BUILD)/loadgen
$(BUILD)/loadgen: bench/loadgen.c $(LIB_OBJ)
	@echo "  LD  $@"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS)

clean:
	rm -rf build build-san build-fuzz

.PHONY: all unit test fuzz bench clean
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
