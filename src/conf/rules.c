/*
 * rules.c - the generic YAML rule engine: walking libyaml's nodes by tables of key rules.
 *
 * A section is read in one pass over its mapping: each key is looked up in the section's
 * table, refused when unknown (the message lists the keys the table holds), given twice, or
 * in the contract but not built yet; otherwise its value is read by the rule's kind and
 * stored at the rule's offset into the object the caller passed. Nested sections recurse
 * through the same function, so a position is reported the same way at every depth (in the
 * file the node came from: conf/source.c). The readers check type, unit and bounds only:
 * whatever needs two keys at once, or the whole file, is the schema's (conf/schema.c).
 */
#include "conf/rules.h"
#include "conf/source.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Node <n>'s file: its own when the load came from several. */
static const char *node_file(struct rules_ctx *x, const yaml_node_t *n)
{
	const char *f = x->src && n ? conf_source_file(x->src, n) : NULL;
	return f ? f : x->file;
}

void rules_where(struct rules_ctx *x, const yaml_node_t *n, char *out, size_t len)
{
	snprintf(out, len, "%s:%zu:%zu", node_file(x, n), n ? n->start_mark.line + 1 : 1,
		 n ? n->start_mark.column + 1 : 1);
}

/* <n>'s value came from ${...}: show the text it was written as in its place in msg. */
static void hide_value(struct rules_ctx *x, const yaml_node_t *n, char *msg, size_t size)
{
	const char *orig = x->src && n ? conf_source_orig(x->src, n) : NULL;
	const char *value = rules_scalar(n), *at;
	char rest[sizeof(x->err->msg)];
	if (!orig || !value || !*value || !(at = strstr(msg, value)))
		return;
	snprintf(rest, sizeof(rest), "%s", at + strlen(value));
	snprintf(msg + (at - msg), size - (size_t)(at - msg),
		 "%s%s (a value from the environment, not shown)", orig, rest);
}

int rules_fail(struct rules_ctx *x, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;
	char where[sizeof(x->err->msg)];
	rules_where(x, n, where, sizeof(where));
	int len = snprintf(x->err->msg, sizeof(x->err->msg), "%s: ", where);
	if (len < 0 || (size_t)len >= sizeof(x->err->msg))
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(x->err->msg + len, sizeof(x->err->msg) - (size_t)len, fmt, ap);
	va_end(ap);
	hide_value(x, n, x->err->msg + len, sizeof(x->err->msg) - (size_t)len);
	return -EINVAL;
}

yaml_node_t *rules_node(struct rules_ctx *x, int id)
{
	return yaml_document_get_node(x->doc, id);
}

const char *rules_scalar(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

const char *rules_kind_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_SCALAR_NODE:
		return "a scalar";
	default:
		return "nothing";
	}
}

yaml_node_t *rules_value_of(struct rules_ctx *x, yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		const char *name = rules_scalar(rules_node(x, p->key));
		if (name && strcmp(name, key) == 0)
			return rules_node(x, p->value);
	}
	return NULL;
}

enum rules_unit rules_unit_of(const char *key)
{
	size_t n = strlen(key);
	if (n > 3 && !strcmp(key + n - 3, "_ms"))
		return RULES_MS;
	if (n > 2 && !strcmp(key + n - 2, "_s"))
		return RULES_S;
	if (n > 6 && !strcmp(key + n - 6, "_bytes"))
		return RULES_BYTES;
	return RULES_PLAIN;
}

/* The units of sizes and durations: how many of the unit's base (a byte, a millisecond). */
struct unit {
	const char *suffix;
	uint64_t mul;
};

static const struct unit size_units[] = {
    {"k", 1ull << 10},	 {"K", 1ull << 10},   {"KiB", 1ull << 10}, {"m", 1ull << 20},
    {"M", 1ull << 20},	 {"MiB", 1ull << 20}, {"g", 1ull << 30},   {"G", 1ull << 30},
    {"GiB", 1ull << 30}, {"t", 1ull << 40},   {"T", 1ull << 40},   {"TiB", 1ull << 40},
    {NULL, 0},
};

static const struct unit time_units[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {NULL, 0},
};

int rules_read_uint(struct rules_ctx *x, yaml_node_t *n, uint64_t min, uint64_t max,
		    enum rules_unit unit, uint64_t *out)
{
	static const char *const unit_name[] = {"", " bytes", " ms", " s"};
	static const char *const expected[] = {
	    "",
	    " with an optional size unit: k, m, g, t (or KiB, MiB, GiB, TiB; powers of 1024)",
	    " with an optional unit: ms, s, m or h (a bare number is milliseconds)",
	    " with an optional unit: ms, s, m or h (a bare number is seconds)",
	};
	const char *s = rules_scalar(n);
	if (!s || !*s)
		return rules_fail(x, n, "expected a number, found %s", rules_kind_name(n));
	uint64_t v = 0;
	const char *p = s;
	while (*p >= '0' && *p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return rules_fail(x, n, "'%s' is too large", s);
		v = v * 10 + (uint64_t)(*p++ - '0');
	}
	if (p == s)
		return rules_fail(x, n, "expected a number%s, found '%s'", expected[unit], s);
	if (*p) {
		const struct unit *u = unit == RULES_BYTES   ? size_units
				       : unit == RULES_PLAIN ? NULL
							     : time_units;
		while (u && u->suffix && strcmp(p, u->suffix))
			u++;
		if (!u || !u->suffix)
			return rules_fail(x, n, "expected a number%s, found '%s'", expected[unit],
					  s);
		if (v > UINT64_MAX / u->mul)
			return rules_fail(x, n, "'%s' is too large", s);
		v *= u->mul;
		if (unit == RULES_S) {
			if (v % 1000)
				return rules_fail(x, n, "'%s' is not a whole number of seconds", s);
			v /= 1000;
		}
		if (v < min || v > max)
			return rules_fail(
			    x, n, "%s (%llu%s) is out of range: expected %llu to %llu%s", s,
			    (unsigned long long)v, unit_name[unit], (unsigned long long)min,
			    (unsigned long long)max, unit_name[unit]);
	}
	if (v < min || v > max)
		return rules_fail(x, n, "%s is out of range: expected %llu to %llu", s,
				  (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return 0;
}

int rules_read_string(struct rules_ctx *x, yaml_node_t *n, char **out)
{
	const char *s = rules_scalar(n);
	if (!s)
		return rules_fail(x, n, "expected a string, found %s", rules_kind_name(n));
	char *copy = strdup(s);
	if (!copy)
		return rules_fail(x, n, "out of memory");
	free(*out);
	*out = copy;
	return 0;
}

int rules_read_choice(struct rules_ctx *x, yaml_node_t *n, const char *what,
		      const char *const *names, unsigned nnames, unsigned *out)
{
	const char *s = rules_scalar(n);
	if (!s)
		return rules_fail(x, n, "%s: expected a string, found %s", what,
				  rules_kind_name(n));
	char expected[128] = "";
	for (unsigned i = 0; i < nnames; i++) {
		if (!strcmp(s, names[i])) {
			*out = i;
			return 0;
		}
		size_t used = strlen(expected);
		snprintf(expected + used, sizeof(expected) - used, "%s%s",
			 !i		  ? ""
			 : i + 1 < nnames ? ", "
					  : " or ",
			 names[i]);
	}
	return rules_fail(x, n, "%s '%s': expected %s", what, s, expected);
}

int rules_read_addr(struct rules_ctx *x, yaml_node_t *n, struct conf_listen *l)
{
	const char *why;
	int err = rules_read_string(x, n, &l->address);
	if (err)
		return err;
	if (net_addr_parse(l->address, &l->addr, &why) < 0)
		return rules_fail(x, n, "bad address '%s': %s", l->address, why);
	return 0;
}

int rules_read_cidr(struct rules_ctx *x, yaml_node_t *n, const char *what, struct net_cidr *out)
{
	const char *text = rules_scalar(n), *why = NULL;
	if (!text)
		return rules_fail(x, n,
				  "%s: expected an address block such as 10.0.0.0/8, found %s",
				  what, rules_kind_name(n));
	if (net_cidr_parse(text, out, &why) < 0)
		return rules_fail(x, n, "%s: '%s': %s", what, text, why);
	return 0;
}

void rules_names(char *out, size_t len, const struct rule *rules)
{
	size_t used = 0;
	out[0] = '\0';
	for (const struct rule *r = rules; r->name && used < len; r++)
		used += (size_t)snprintf(out + used, len - used, "%s%s", r == rules ? "" : ", ",
					 r->name);
}

/* Read one value <v> of key <k> by its rule into <obj>. */
static int read_value(struct rules_ctx *x, const char *section, const struct rule *r,
		      yaml_node_t *k, yaml_node_t *v, void *obj)
{
	char *field = (char *)obj + r->off;
	const char *b;
	uint64_t u;
	int err = 0;

	switch (r->kind) {
	case RULE_UINT:
		err = rules_read_uint(x, v, r->min, r->max, rules_unit_of(r->name), &u);
		if (!err)
			*(unsigned *)(void *)field = (unsigned)u;
		break;
	case RULE_SIZE:
		err = rules_read_uint(x, v, r->min, r->max, RULES_BYTES, &u);
		if (!err)
			*(uint64_t *)(void *)field = u;
		break;
	case RULE_BOOL:
		b = rules_scalar(v);
		if (b && (strcmp(b, "true") == 0 || strcmp(b, "false") == 0))
			*(unsigned *)(void *)field = b[0] == 't';
		else
			err = rules_fail(x, v, "%s: expected true or false", r->name);
		break;
	case RULE_STR:
		err = rules_read_string(x, v, (char **)(void *)field);
		break;
	case RULE_ADDR:
		err = rules_read_addr(x, v, (struct conf_listen *)(void *)field);
		break;
	case RULE_SECTION:
		if (r->fn)
			err = r->fn(x, r, v, field);
		else
			err = rules_read_section(x, v, r->name, r->sub, field);
		break;
	case RULE_UNBUILT:
		err = rules_fail(x, k,
				 "%s: '%s' is part of the config contract but not built yet; "
				 "remove it (see docs/config.md, \"Not yet built\")",
				 section, r->name);
		break;
	}
	return err;
}

int rules_read_section(struct rules_ctx *x, yaml_node_t *map, const char *section,
		       const struct rule *rules, void *obj)
{
	if (map->type != YAML_MAPPING_NODE)
		return rules_fail(x, map, "%s: expected a mapping of keys, found %s", section,
				  rules_kind_name(map));
	for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
	     pair < map->data.mapping.pairs.top; pair++) {
		yaml_node_t *k = rules_node(x, pair->key), *v = rules_node(x, pair->value);
		const char *name = rules_scalar(k);
		if (!name)
			return rules_fail(x, k, "%s: keys must be plain strings", section);
		for (yaml_node_pair_t *prev = map->data.mapping.pairs.start; prev < pair; prev++) {
			const char *pname = rules_scalar(rules_node(x, prev->key));
			if (pname && strcmp(pname, name) == 0)
				return rules_fail(x, k, "%s: key '%s' is given twice", section,
						  name);
		}
		const struct rule *r = rules;
		while (r->name && strcmp(r->name, name) != 0)
			r++;
		if (!r->name) {
			char keys[512];
			rules_names(keys, sizeof(keys), rules);
			return rules_fail(x, k, "%s: unknown key '%s'; expected one of: %s",
					  section, name, keys);
		}
		int err = read_value(x, section, r, k, v, obj);
		if (err)
			return err;
	}
	return 0;
}

int rules_read_list(struct rules_ctx *x, yaml_node_t *seq, const char *what, void **items,
		    size_t *count, size_t size,
		    int (*fn)(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t index))
{
	if (seq->type != YAML_SEQUENCE_NODE)
		return rules_fail(x, seq,
				  "%s: expected a list (items starting with '- '), found %s", what,
				  rules_kind_name(seq));
	size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
	if (n == 0)
		return rules_fail(x, seq, "%s: the list is empty", what);
	if (*items)
		return rules_fail(x, seq, "%s: given twice", what);
	*items = calloc(n, size);
	if (!*items)
		return rules_fail(x, seq, "out of memory");
	*count = n;
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *item = rules_node(x, seq->data.sequence.items.start[i]);
		int err = fn(x, item, (char *)*items + i * size, i);
		if (err)
			return err;
	}
	return 0;
}

void rules_print(FILE *out, const char *prefix, const struct rule *rules)
{
	for (const struct rule *r = rules; r->name; r++) {
		if (r->kind == RULE_UNBUILT)
			continue;
		fprintf(out, "%s%s\n", prefix, r->name);
		if (r->kind == RULE_SECTION && r->sub) {
			char sub[128];
			snprintf(sub, sizeof(sub), "%s%s.", prefix, r->name);
			rules_print(out, sub, r->sub);
		}
	}
}

int rules_header_name_ok(const char *s)
{
	if (!*s || strlen(s) > 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
			return 0;
	return 1;
}
