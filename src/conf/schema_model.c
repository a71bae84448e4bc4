/*
 * schema_model.c - match.model and backends[].models (see schema_model.h).
 *
 * A model name is what a client writes in "model" and a backend answers to: 1 to
 * CONF_MODEL_MAX bytes, no control bytes. A pattern is a name that may hold '*' (any run)
 * and '?' (one byte); '[', ']' and '\' are refused because they mean classes and escapes in
 * other glob dialects, which this one does not have (core/glob.h). A backend's models are
 * plain names, so no '*' or '?' there, each once per backend.
 */
#include "conf/schema_model.h"

#include <stdlib.h>
#include <string.h>

/* Is <s> a model name (a pattern when <pattern>)? NULL, or what is wrong with it. */
static const char *model_name_fault(const char *s, int pattern)
{
	size_t n = strlen(s);
	if (!n)
		return "is empty";
	if (n > CONF_MODEL_MAX)
		return "is longer than 255 bytes";
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch < 0x20 || ch == 0x7f)
			return "holds a control byte";
		if (pattern && (ch == '[' || ch == ']' || ch == '\\'))
			return "holds '[', ']' or '\\': a pattern has only '*' (any run) and '?' "
			       "(one byte)";
		if (!pattern && (ch == '*' || ch == '?'))
			return "holds '*' or '?': a backend lists plain names (patterns go in "
			       "routes[].match.model)";
	}
	return NULL;
}

/* A scalar model name (or pattern) at <v> into *out, or a message. */
static int read_name(struct rules_ctx *x, yaml_node_t *v, const char *what, int pattern, char **out)
{
	const char *s = rules_scalar(v);
	if (!s)
		return rules_fail(x, v, "%s: expected a model name, found %s", what,
				  rules_kind_name(v));
	const char *fault = model_name_fault(s, pattern);
	if (fault)
		return rules_fail(x, v, "%s: '%s' %s", what, s, fault);
	return rules_read_string(x, v, out);
}

int schema_read_match_model(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_route *rt = obj;
	(void)r;
	return read_name(x, v, "match.model", 1, &rt->model);
}

static int read_model_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	char **names = (char **)obj - i; /* the list's first item */
	int err = read_name(x, item, "backends: models", 0, (char **)obj);
	for (size_t j = 0; !err && j < i; j++)
		if (strcmp(names[j], names[i]) == 0)
			return rules_fail(x, item, "backends: models: '%s' is listed twice",
					  names[i]);
	return err;
}

int schema_read_backend_models(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_backend *b = obj;
	(void)r;
	return rules_read_list(x, v, "backends: models", (void **)&b->models, &b->nmodels,
			       sizeof(char *), read_model_item);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Does an api: openai route reach pool <p> (as its pool or its spillover)? */
static int openai_reaches(const struct conf *c, size_t p)
{
	for (size_t i = 0; i < c->nroutes; i++) {
		const struct conf_route *r = &c->routes[i];
		if (r->api == CONF_API_OPENAI &&
		    (r->pool == p || (r->has_spill && r->spill_pool == p)))
			return 1;
	}
	return 0;
}

/* <s> as the inside of a JSON string (names hold no control bytes) at out[n..cap). */
static size_t put_json_text(char *out, size_t cap, size_t n, const char *s)
{
	for (; *s; s++) {
		if ((*s == '"' || *s == '\\') && n < cap)
			out[n++] = '\\';
		if (n < cap)
			out[n++] = *s;
	}
	return n;
}

static size_t put_text(char *out, size_t cap, size_t n, const char *s)
{
	size_t k = strlen(s);
	if (n + k <= cap)
		memcpy(out + n, s, k);
	return n + k;
}

int schema_model_list(struct rules_ctx *x, yaml_node_t *routes, struct conf *c)
{
	size_t total = 0, n = 0, u = 0, len = 0;
	int err = 0;
	for (size_t p = 0; p < c->npools; p++)
		for (size_t b = 0; b < c->pools[p].nbackends; b++)
			total += c->pools[p].backends[b].nmodels;
	if (!total)
		return 0;
	const char **names = calloc(total, sizeof(*names));
	char *json = malloc(CONF_MODELS_JSON_MAX);
	uint32_t(*obj)[2] = calloc(total, sizeof(*obj));
	if (!names || !json || !obj) {
		err = rules_fail(x, routes, "out of memory");
		goto out;
	}
	for (size_t p = 0; p < c->npools; p++) {
		if (!openai_reaches(c, p))
			continue;
		for (size_t b = 0; b < c->pools[p].nbackends; b++)
			for (size_t m = 0; m < c->pools[p].backends[b].nmodels; m++)
				names[n++] = c->pools[p].backends[b].models[m];
	}
	if (!n)
		goto out; /* models, but on no pool an api: openai route reaches */
	qsort(names, n, sizeof(*names), cmp_name);
	for (size_t i = 0; i < n; i++)
		if (!u || strcmp(names[u - 1], names[i]) != 0)
			names[u++] = names[i];
	len = put_text(json, CONF_MODELS_JSON_MAX, 0, "{\"object\":\"list\",\"data\":[");
	for (size_t i = 0; i < u; i++) {
		if (i)
			len = put_text(json, CONF_MODELS_JSON_MAX, len, ",");
		size_t start = len;
		len = put_text(json, CONF_MODELS_JSON_MAX, len, "{\"id\":\"");
		len = put_json_text(json, CONF_MODELS_JSON_MAX, len, names[i]);
		len = put_text(json, CONF_MODELS_JSON_MAX, len,
			       "\",\"object\":\"model\",\"created\":0,\"owned_by\":\"accelnet\"}");
		obj[i][0] = (uint32_t)start;
		obj[i][1] = (uint32_t)(len - start);
	}
	len = put_text(json, CONF_MODELS_JSON_MAX, len, "]}\n");
	if (len >= CONF_MODELS_JSON_MAX) {
		err = rules_fail(x, routes,
				 "the %zu models of the pools behind api: openai routes make a "
				 "GET /v1/models list over %d bytes: list fewer in "
				 "backends[].models",
				 u, CONF_MODELS_JSON_MAX);
		goto out;
	}
	c->models.names = names;
	c->models.json = json;
	c->models.obj = obj;
	c->models.len = len;
	c->models.n = u;
	names = NULL, json = NULL, obj = NULL;
out:
	free(names);
	free(json);
	free(obj);
	return err;
}
