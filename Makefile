# accelnet - a plain Makefile. `make` builds build/accelnet; `make test` runs every test;
# `make SAN=1` builds into build-san/ with AddressSanitizer and UBSan, `make TSAN=1` into
# build-tsan/ with ThreadSanitizer; `make fuzz` builds the
# libFuzzer targets with clang; `make bench` the load generator of bench/run.

SAN ?= 0
TSAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT = -O1
else ifeq ($(TSAN),1)
BUILD ?= build-tsan
SANFLAGS = -fsanitize=thread -fno-omit-frame-pointer
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

CC ?= gcc
PKGS = yaml-0.1 openssl libxxhash jansson libcrypt libzmq msgpack libcares hiredis libpcre2-8 libnghttp2 libutf8proc liburing
WARN = -Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wpointer-arith \
       -Wformat=2 -Wvla -Wundef -Werror
CFLAGS ?= $(OPT) -g
# asked of pkg-config once a make, not once a compile (a recursive variable runs its shell
# each time it is expanded)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
ALL_CFLAGS = -std=c17 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) -Isrc -Iinclude -MMD -MP \
	     $(PKG_CFLAGS)
LDLIBS = $(PKG_LIBS) -lsentencepiece -lstdc++ -lpthread -lm
# SentencePiece models go through libsentencepiece, a C++ library: one C++ file of ours,
# src/tok/spm_shim.cc, calls it behind a C interface (src/tok/spm.h); all else is C. The
# programs link with the C compiler, so UBSan's C++-only vptr check (its runtime is C++'s) is off
CXX ?= g++
CXX_SRC = src/tok/spm_shim.cc
ALL_CXXFLAGS = -std=c++17 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Werror $(CFLAGS) $(SANFLAGS) \
	       $(if $(SANFLAGS),-fno-sanitize=vptr) -Isrc -Iinclude -MMD -MP

LIB_SRC = $(wildcard src/core/*.c src/net/*.c src/http/*.c src/policy/*.c src/conf/*.c \
	  src/tok/*.c src/proxy/*.c src/runtime/*.c src/control/*.c src/obs/*.c src/guard/*.c src/cache/*.c src/sim/*.c src/xfer/*.c)
CLI_SRC = $(wildcard src/cli/*.c)
# The dashboard's files (src/obs/dashboard/), embedded by a generated C file (obs/dashboard.h)
DASH_ASSETS = $(sort $(wildcard src/obs/dashboard/*.html src/obs/dashboard/*.js \
	      src/obs/dashboard/*.css))
DASH_OBJ = $(BUILD)/obj/gen/dashboard_assets.o
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CXX_SRC:%.cc=$(BUILD)/obj/%.o) $(DASH_OBJ)
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

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	@echo "  CXX $<"
	@$(CXX) $(ALL_CXXFLAGS) -c -o $@ $<

$(BUILD)/gen/dashboard_assets.c: $(DASH_ASSETS) scripts/embed-assets.sh
	@mkdir -p $(dir $@)
	@echo "  GEN $@"
	@scripts/embed-assets.sh $@ $(DASH_ASSETS)

$(DASH_OBJ): $(BUILD)/gen/dashboard_assets.c
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -c -o $@ $<

# The unit tests and the bench's tools link the library as an archive: the linker takes only
# the objects each one needs (a third of the link's time, 46 tests x 3 builds in scripts/test.sh)
$(BUILD)/libaccelnet.a: $(LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libaccelnet.a
	@mkdir -p $(dir $@)
	@echo "  TEST $@"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs cmocka)

unit: $(UNIT_BIN)

test: all unit
	tests/run.sh

FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN = $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_LIB = $(filter-out src/sim/% src/proxy/% src/runtime/% src/control/% src/obs/% src/xfer/engine.c src/xfer/send.c src/xfer/daemon.c src/xfer/receiver.c src/xfer/pull.c src/xfer/get.c src/xfer/metrics.c,$(LIB_SRC)) \
	   src/obs/promtext.c src/obs/kvevent.c src/control/apipath.c
# The library the fuzz targets share is compiled once (instrumented for coverage, ASan and UBSan)
# into build-fuzz/libfuzz.a; each target is then one compile and a link.
FUZZ_DEBUG ?= -g
FUZZ_CC ?= clang
FUZZ_CXX ?= clang++
FUZZ_CFLAGS = -std=c17 -D_GNU_SOURCE $(FUZZ_DEBUG) -O1 -Isrc -Iinclude -MMD -MP $(PKG_CFLAGS)
FUZZ_OBJ = $(FUZZ_LIB:%.c=build-fuzz/obj/%.o) $(CXX_SRC:%.cc=build-fuzz/obj/%.o)
fuzz: $(FUZZ_BIN)
build-fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC  $< (fuzz)"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -c -o $@ $<
build-fuzz/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	@echo "  CXX $< (fuzz)"
	@$(FUZZ_CXX) -std=c++17 -D_GNU_SOURCE $(FUZZ_DEBUG) -O1 -Isrc -Iinclude -MMD -MP \
		-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr -c -o $@ $<
build-fuzz/libfuzz.a: $(FUZZ_OBJ)
	@rm -f $@
	@ar rcs $@ $^
build-fuzz/%: tests/fuzz/%.c build-fuzz/libfuzz.a
	@echo "  FUZZ $@"
	@$(FUZZ_CC) $(filter-out -MMD -MP,$(FUZZ_CFLAGS)) -fsanitize=fuzzer,address,undefined \
		-o $@ $< build-fuzz/libfuzz.a $(LDLIBS)

bench: $(BUILD)/loadgen $(BUILD)/tlsload $(BUILD)/pickcost $(BUILD)/l4echo $(BUILD)/tokbench \
       $(BUILD)/filecost $(BUILD)/fdcost
$(BUILD)/filecost: bench/filecost.c
	@echo "  LD  $@"
	@mkdir -p $(BUILD)
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^
$(BUILD)/fdcost: bench/fdcost.c
	@echo "  LD  $@"
	@mkdir -p $(BUILD)
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ -lpthread
$(BUILD)/l4echo: bench/l4echo.c
	@echo "  LD  $@"
	@mkdir -p $(BUILD)
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ -lpthread
$(BUILD)/tlsload: bench/tlsload.c
	@echo "  LD  $@"
	@mkdir -p $(BUILD)
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS)
$(BUILD)/loadgen: bench/loadgen.c $(BUILD)/libaccelnet.a
	@echo "  LD  $@"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS)
$(BUILD)/tokbench: bench/tokbench.c $(BUILD)/libaccelnet.a
	@echo "  LD  $@"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS)
$(BUILD)/pickcost: bench/pickcost.c $(BUILD)/libaccelnet.a
	@echo "  LD  $@"
	@$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $^ $(LDLIBS)

# `make format-check` lists the C sources that differ from .clang-format (fails if any);
# `make format` rewrites them in place. `make layers` runs the layering check.
CLANG_FORMAT ?= clang-format-14
FORMAT_SRC = $(sort $(shell find src include tests/unit tests/fuzz -name '*.[ch]' \
	     -not -path 'tests/fuzz/corpus/*') bench/loadgen.c bench/tlsload.c bench/pickcost.c \
	     bench/l4echo.c bench/tokbench.c bench/filecost.c bench/fdcost.c)
format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || \
		{ echo "format-check: no $(CLANG_FORMAT) (scripts/deps.sh installs it)"; exit 2; }
	@n=0; for f in $(FORMAT_SRC); do \
		$(CLANG_FORMAT) --dry-run -Werror "$$f" >/dev/null 2>&1 || { echo "$$f"; n=$$((n + 1)); }; \
	done; \
	echo "format-check: $$n of $(words $(FORMAT_SRC)) files differ from .clang-format"; \
	[ $$n -eq 0 ] || { echo "format-check: 'make format' rewrites them"; exit 1; }
format:
	$(CLANG_FORMAT) -i $(FORMAT_SRC)
layers:
	@/usr/bin/python3 scripts/check-layers.py --self-test
	@/usr/bin/python3 scripts/check-layers.py

# `make man` writes the man pages from docs/config.md and the binary's own usage
# (scripts/gen-man.py); `make install` puts the binary, the man pages, the systemd units and a
# sample config (never over an existing one) under $(DESTDIR)$(PREFIX) and $(DESTDIR)/etc;
# `make uninstall` takes them away again (the config stays); `make deb` builds the .deb
# (scripts/build-deb.sh).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/accelnet
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
MAN_PAGES = $(BUILD)/man/accelnet.1 $(BUILD)/man/accelnet.yaml.5
UNITS = packaging/systemd/accelnet.service packaging/systemd/accelnet.socket

man: $(MAN_PAGES)
$(MAN_PAGES) &: $(BUILD)/accelnet docs/config.md scripts/gen-man.py
	@echo "  MAN $(MAN_PAGES)"
	@/usr/bin/python3 scripts/gen-man.py --bin $(BUILD)/accelnet --out $(BUILD)/man

install: $(BUILD)/accelnet $(MAN_PAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(SYSCONFDIR)/accelnet
	install -m 0755 $(BUILD)/accelnet $(DESTDIR)$(BINDIR)/accelnet
	install -m 0644 $(BUILD)/man/accelnet.1 $(DESTDIR)$(MANDIR)/man1/accelnet.1
	install -m 0644 $(BUILD)/man/accelnet.yaml.5 $(DESTDIR)$(MANDIR)/man5/accelnet.yaml.5
	for u in $(UNITS); do \
		sed -e 's|/usr/bin/accelnet|$(BINDIR)/accelnet|g' \
		    -e 's|/etc/accelnet/|$(SYSCONFDIR)/accelnet/|g' "$$u" \
		    > $(DESTDIR)$(UNITDIR)/$$(basename "$$u") && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename "$$u") || exit 1; \
	done
	install -m 0644 packaging/accelnet.yaml $(DESTDIR)$(DOCDIR)/examples/accelnet.yaml
	[ -e $(DESTDIR)$(SYSCONFDIR)/accelnet/accelnet.yaml ] || \
		install -m 0640 packaging/accelnet.yaml $(DESTDIR)$(SYSCONFDIR)/accelnet/accelnet.yaml

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/accelnet $(DESTDIR)$(MANDIR)/man1/accelnet.1 \
		$(DESTDIR)$(MANDIR)/man5/accelnet.yaml.5 $(DESTDIR)$(UNITDIR)/accelnet.service \
		$(DESTDIR)$(UNITDIR)/accelnet.socket $(DESTDIR)$(DOCDIR)/examples/accelnet.yaml
	-rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null

deb: $(BUILD)/accelnet $(MAN_PAGES)
	scripts/build-deb.sh $(BUILD) $(BUILD)/deb

clean:
	rm -rf build build-san build-tsan build-fuzz

.PHONY: all unit test fuzz bench clean format-check format layers man install uninstall deb
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d)
