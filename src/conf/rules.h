/*
 * rules.h - the generic YAML rule engine: key tables, typed value readers, positioned errors.
 *
 * libyaml's document API gives a tree whose nodes remember their line and column. A section
 * of a config is read by a table of rules: each rule names a key, how to read its value (a
 * bounded integer, a size such as 256MiB, a string, a boolean, an address, a nested section)
 * and where to store it (an offset into the object the section fills). An integer key named
 * *_ms or *_s takes a duration (10s, 250ms), one named *_bytes a size (16m), so no table
 * says so twice. The table is the only list of the keys a section accepts: the "expected
 * one of" messages and the key dump are printed from it. Unknown keys, keys given twice and values
 * of the wrong type are errors "FILE:LINE:COL: message"; a key whose feature is not built yet is
 * refused by name.
 *
 * This file knows no key of the proxy's schema (conf/schema.c has those); everything here
 * would read any other YAML config as well.
 */
#ifndef ACCELNET_CONF_RULES_H
#define ACCELNET_CONF_RULES_H

#include "conf/model.h"

#include <stdint.h>
#include <stdio.h>
#include <yaml.h>

struct conf_source;

/* One load: where messages go and what they name. */
struct rules_ctx {
	const char *file;
	yaml_document_t *doc;
	struct conf_error *err;
	void *user;		       /* the schema's own loading state */
	const struct conf_source *src; /* each node's file and ${...} text; NULL: all <file> */
};

/* How a number's unit reads: a key's name says (rules_unit_of). */
enum rules_unit {
	RULES_PLAIN, /* digits only */
	RULES_BYTES, /* a size: 512k, 16m, 1g, 64KiB, ... (powers of 1024) */
	RULES_MS,    /* a duration in milliseconds: 250ms, 10s, 5m, 1h; bare: ms */
	RULES_S,     /* a duration in seconds: 10s, 5m, 1h, 2000ms; bare: s */
};

enum rule_kind {
	RULE_UINT,    /* unsigned, min..max */
	RULE_SIZE,    /* uint64_t, digits with an optional KiB/MiB/GiB (or K/M/G) suffix */
	RULE_STR,     /* char *, any scalar */
	RULE_ADDR,    /* struct conf_listen: address text and resolved address */
	RULE_BOOL,    /* unsigned 0 or 1, from true or false */
	RULE_SECTION, /* a nested value: read by fn, or (fn NULL) a mapping read by sub */
	RULE_UNBUILT, /* in the contract, not built yet: refused by name */
};

struct rule {
	const char *name;
	enum rule_kind kind;
	size_t off;		/* where the value goes in the section's object */
	uint64_t min, max;	/* RULE_UINT, RULE_SIZE */
	const struct rule *sub; /* RULE_SECTION: the keys inside it (read, dumped) */
	/* RULE_SECTION: read <val> into <field> (the object plus off); 0 or -EINVAL */
	int (*fn)(struct rules_ctx *x, const struct rule *r, yaml_node_t *val, void *field);
};

#define RULES_END                                                                                  \
	{                                                                                          \
		NULL, 0, 0, 0, 0, NULL, NULL                                                       \
	}

/* Put "FILE:LINE:COL: message" (of <n>; 1:1 when NULL) in x->err. Returns -EINVAL. When
 * <n>'s value came from ${...}, the message shows that text, never the value. */
int rules_fail(struct rules_ctx *x, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

yaml_node_t *rules_node(struct rules_ctx *x, int id);
/* The text of a scalar node, or NULL for a mapping or list. */
const char *rules_scalar(const yaml_node_t *n);
/* "a mapping", "a list", "a scalar": for "found ..." in messages. */
const char *rules_kind_name(const yaml_node_t *n);
/* The value of <key> in the mapping <map>, or NULL (also when <map> is no mapping). */
yaml_node_t *rules_value_of(struct rules_ctx *x, yaml_node_t *map, const char *key);

/* "FILE:LINE:COL" of <n> into out[len]: for a message that names a second place. */
void rules_where(struct rules_ctx *x, const yaml_node_t *n, char *out, size_t len);

/* Typed readers: 0, or -EINVAL with the message at <n>. A number in <unit>, within
 * min..max of that unit. */
int rules_read_uint(struct rules_ctx *x, yaml_node_t *n, uint64_t min, uint64_t max,
		    enum rules_unit unit, uint64_t *out);
/* The unit of a key by its name: *_ms, *_s durations, *_bytes sizes, else plain. */
enum rules_unit rules_unit_of(const char *key);
/* A scalar copied into *out (the old value freed). */
int rules_read_string(struct rules_ctx *x, yaml_node_t *n, char **out);
/* One of <names> (the scalar compared whole): *out its index; else a message at <n> that
 * says "<what> '<value>': expected a or b". */
int rules_read_choice(struct rules_ctx *x, yaml_node_t *n, const char *what,
		      const char *const *names, unsigned nnames, unsigned *out);
/* Is <s> a header name a config may give (letters, digits, '-', '_'; 1-64 bytes)? */
int rules_header_name_ok(const char *s);
int rules_read_addr(struct rules_ctx *x, yaml_node_t *n, struct conf_listen *l);
/* An address block such as 10.0.0.0/8; <what> names the list in messages. */
int rules_read_cidr(struct rules_ctx *x, yaml_node_t *n, const char *what, struct net_cidr *out);

/* Check that <map> is a mapping of known, unique keys, and read each value by its rule
 * into <obj>; <section> names it in messages. */
int rules_read_section(struct rules_ctx *x, yaml_node_t *map, const char *section,
		       const struct rule *rules, void *obj);
/* Call <fn> on each item of the non-empty list <seq>, into a new array of *count items of
 * <size> bytes at *items (the caller frees it, also after an error). */
int rules_read_list(struct rules_ctx *x, yaml_node_t *seq, const char *what, void **items,
		    size_t *count, size_t size,
		    int (*fn)(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t index));

/* "a, b, c": every key of <rules>, into out[len]. */
void rules_names(char *out, size_t len, const struct rule *rules);
/* Every key path of <rules> and their sub-tables, "<prefix>name", one per line; keys not
 * built yet are left out. */
void rules_print(FILE *out, const char *prefix, const struct rule *rules);

#endif
