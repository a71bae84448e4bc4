/*
 * adminapi.c - the runtime admin API's calls (see adminapi.h).
 *
 * A call's body is one JSON object read by jansson (duplicate keys refused, nesting capped by
 * jansson, the size by the endpoint's max_body); every key it takes is listed, and one it
 * does not take is refused by name, so a typo ("wieght") is an error rather than a no-op.
 * Numbers must be integers in range. A change is made, logged (manage.c), then persisted; a
 * change made but not persisted (a full disk) is answered 200 with "persisted": false and
 * the reason, since it holds until the proxy stops.
 */
#include "control/adminapi.h"
#include "cache/store.h"
#include "core/log.h"
#include "control/apipath.h"
#include "control/manage.h"
#include "control/statefile.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_MAX 512

/* Answer <doc> (consumed) with <status>. */
static void reply(struct hsrv_conn *c, int status, const char *headers, json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!text) {
		hsrv_respond(c, 500, "application/json", "", "{\"error\":\"out of memory\"}\n", 26);
		return;
	}
	size_t n = strlen(text);
	char *body = realloc(text, n + 2);
	if (body) {
		body[n++] = '\n';
		text = body;
	}
	hsrv_respond(c, status, "application/json", headers, text, n);
	free(text);
}

static void reply_error(struct hsrv_conn *c, int status, const char *headers, const char *msg)
{
	reply(c, status, headers, json_pack("{s:s}", "error", msg));
}

/* The HTTP status of manage.h's -errno. */
static int status_of(int rc)
{
	switch (rc) {
	case -ENOENT:
		return 404;
	case -EINVAL:
		return 400;
	case -ENOMEM:
		return 500;
	default: /* -EEXIST, -ENOSPC, -EPERM, -EALREADY, -EOPNOTSUPP */
		return 409;
	}
}

static json_t *backend_json(const struct backend *b)
{
	return json_pack(
	    "{s:s,s:s,s:s,s:I,s:I,s:b,s:I,s:b}", "address", manage_address(b), "source",
	    b->source == BACKEND_FROM_API   ? "api"
	    : b->source == BACKEND_FROM_DNS ? "dns"
					    : "config",
	    "state", backend_state_name(b), "weight", (json_int_t)atomic_load(&b->weight),
	    "max_concurrency", (json_int_t)backend_cap(b), "up", atomic_load(&b->up) != 0,
	    "inflight", (json_int_t)atomic_load(&b->share->inflight), "present",
	    backend_present(b));
}

static json_t *maintenance_json(const struct runtime *rt)
{
	unsigned m = atomic_load(&rt->maintenance);
	return json_pack("{s:b,s:I}", "on", m != 0, "retry_after_s", (json_int_t)m);
}

/* GET /api/backends */
static void list_backends(struct adminapi *api, struct hsrv_conn *c)
{
	struct runtime *rt = api->rt;
	json_t *pools = json_array();
	for (size_t i = 0; pools && i < rt->npools; i++) {
		const struct pool_rt *p = &rt->pools[i];
		json_t *list = json_array();
		size_t spare = 0, free_slots = 0;
		for (size_t j = 0; list && j < p->nbackends; j++) {
			const struct backend *b = &p->backends[j];
			spare += b->source == BACKEND_FROM_API;
			if (backend_slot_free(b)) {
				free_slots++;
				continue;
			}
			if (b->source == BACKEND_FROM_DNS && !backend_present(b) &&
			    !atomic_load(&b->share->inflight))
				continue; /* an empty discovery slot */
			json_array_append_new(list, backend_json(b));
		}
		json_array_append_new(
		    pools, json_pack("{s:s,s:s,s:I,s:I,s:o*}", "name", p->conf->name, "balance",
				     p->conf->balance->name, "spare_backends", (json_int_t)spare,
				     "free_slots", (json_int_t)free_slots, "backends", list));
	}
	reply(c, 200, "Cache-Control: no-store\r\n",
	      json_pack("{s:o*,s:o*,s:s?}", "pools", pools, "maintenance", maintenance_json(rt),
			"state_file", api->state_file));
}

/*
 * Read the body as a JSON object (an empty body: {}), every key of it one of <keys>. The
 * object, or NULL with the answer given.
 */
static json_t *read_body(struct hsrv_conn *c, const char *body, size_t len, const char *const *keys)
{
	char msg[ERR_MAX];
	json_error_t je;
	const char *key;
	json_t *v;
	if (!len)
		return json_object();
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!doc) {
		snprintf(msg, sizeof(msg), "the body is not JSON: %.200s (at byte %d)", je.text,
			 je.position);
		reply_error(c, 400, "", msg);
		return NULL;
	}
	if (!json_is_object(doc)) {
		json_decref(doc);
		reply_error(c, 400, "", "the body must be a JSON object");
		return NULL;
	}
	json_object_foreach(doc, key, v)
	{
		size_t i = 0;
		while (keys[i] && strcmp(keys[i], key) != 0)
			i++;
		if (!keys[i]) {
			snprintf(msg, sizeof(msg), "unknown key \"%.100s\" in the body", key);
			json_decref(doc);
			reply_error(c, 400, "", msg);
			return NULL;
		}
	}
	return doc;
}

/*
 * Integer <key> of <doc> into *out when present (*given set): lo..hi. 0, or -1 with the
 * answer given.
 */
static int read_uint(struct hsrv_conn *c, const json_t *doc, const char *key, unsigned lo,
		     unsigned hi, unsigned *out, int *given)
{
	char msg[ERR_MAX];
	const json_t *v = json_object_get(doc, key);
	*given = v != NULL;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		snprintf(msg, sizeof(msg), "\"%s\" must be an integer from %u to %u", key, lo, hi);
		reply_error(c, 400, "", msg);
		return -1;
	}
	*out = (unsigned)json_integer_value(v);
	return 0;
}

/* Persist, and answer <status> with {"backend": ...} (or <doc>) and whether it was kept. */
static void reply_changed(struct adminapi *api, struct hsrv_conn *c, int status,
			  const struct backend *b, json_t *doc)
{
	char err[ERR_MAX];
	if (!doc)
		doc = json_pack("{s:o*}", "backend", backend_json(b));
	if (!doc) {
		reply_error(c, 500, "", "out of memory");
		return;
	}
	if (api->state_file) {
		int rc = statefile_save(api->rt, api->state_file, err, sizeof(err));
		json_object_set_new(doc, "persisted", json_boolean(rc == 0));
		if (rc < 0)
			json_object_set_new(doc, "persist_error", json_string(err));
	}
	reply(c, status, "", doc);
}

/* The pool (and backend, when the call names one) of <t>, or NULL with the answer given. */
static struct pool_rt *target_of(struct adminapi *api, struct hsrv_conn *c, const struct apipath *t,
				 struct backend **b)
{
	char msg[ERR_MAX];
	struct pool_rt *p = manage_pool(api->rt, t->pool);
	if (!p) {
		snprintf(msg, sizeof(msg), "no pool named \"%s\"", t->pool);
		reply_error(c, 404, "", msg);
		return NULL;
	}
	if (!b)
		return p;
	if (!(*b = manage_find(p, t->backend))) {
		snprintf(msg, sizeof(msg), "pool %s has no backend \"%s\"", t->pool, t->backend);
		reply_error(c, 404, "", msg);
		return NULL;
	}
	return p;
}

/* POST /api/pools/POOL/backends {"address": A, "weight": N, "max_concurrency": N} */
static void call_add(struct adminapi *api, struct hsrv_conn *c, const struct apipath *t,
		     const char *who, const char *body, size_t len)
{
	static const char *const keys[] = {"address", "weight", "max_concurrency", NULL};
	char err[ERR_MAX];
	unsigned weight = 0, cap = MANAGE_CAP_DEFAULT;
	int given;
	struct backend *b;
	struct pool_rt *p = target_of(api, c, t, NULL);
	json_t *doc = p ? read_body(c, body, len, keys) : NULL;
	if (!doc)
		return;
	const char *addr = json_string_value(json_object_get(doc, "address"));
	if (!addr) {
		reply_error(c, 400, "", "\"address\" (a string, IP:PORT) is required");
		goto out;
	}
	if (read_uint(c, doc, "weight", 1, MANAGE_WEIGHT_MAX, &weight, &given) < 0 ||
	    read_uint(c, doc, "max_concurrency", 0, MANAGE_CAP_MAX, &cap, &given) < 0)
		goto out;
	int rc = manage_check_address(api->rt->conf, addr, err, sizeof(err));
	if (!rc)
		rc = manage_add(p, addr, weight, cap, who, &b, err, sizeof(err));
	if (rc < 0)
		reply_error(c, status_of(rc), "", err);
	else
		reply_changed(api, c, 201, b, NULL);
out:
	json_decref(doc);
}

/* PATCH /api/pools/POOL/backends/ADDRESS {"weight": N, "max_concurrency": N, "state": S}:
 * each given value is checked before any is changed. */
static void call_change(struct adminapi *api, struct hsrv_conn *c, const struct apipath *t,
			const char *who, const char *body, size_t len)
{
	static const char *const keys[] = {"weight", "max_concurrency", "state", NULL};
	char err[ERR_MAX];
	unsigned weight = 0, cap = 0;
	int has_w, has_cap, st = -1, rc = 0;
	struct backend *b;
	struct pool_rt *p = target_of(api, c, t, &b);
	json_t *doc = p ? read_body(c, body, len, keys) : NULL;
	if (!doc)
		return;
	if (read_uint(c, doc, "weight", 1, MANAGE_WEIGHT_MAX, &weight, &has_w) < 0 ||
	    read_uint(c, doc, "max_concurrency", 0, MANAGE_CAP_MAX, &cap, &has_cap) < 0)
		goto out;
	const json_t *sv = json_object_get(doc, "state");
	if (sv && (!json_is_string(sv) || (st = manage_state_of(json_string_value(sv))) < 0)) {
		reply_error(c, 400, "",
			    "\"state\" must be \"enabled\", \"draining\" or \"disabled\"");
		goto out;
	}
	if (!has_w && !has_cap && st < 0) {
		reply_error(c, 400, "", "give \"weight\", \"max_concurrency\" or \"state\"");
		goto out;
	}
	if (st >= 0 && b->source != BACKEND_FROM_DNS && !backend_present(b)) {
		/* (before the weight or cap changes: all of it is refused, or none) */
		snprintf(err, sizeof(err), "backend %s of pool %s is removed: add it again first",
			 b->name, p->conf->name);
		reply_error(c, 409, "", err);
		goto out;
	}
	if (has_w)
		rc = manage_set_weight(p, b, weight, who, err, sizeof(err));
	if (!rc && has_cap)
		rc = manage_set_cap(p, b, cap, who, err, sizeof(err));
	if (!rc && st >= 0)
		rc = manage_set_state(p, b, st, who, err, sizeof(err));
	if (rc < 0)
		reply_error(c, status_of(rc), "", err);
	else
		reply_changed(api, c, 200, b, NULL);
out:
	json_decref(doc);
}

/* DELETE, or POST .../drain|enable|disable|remove (no body, or {}) */
static void call_action(struct adminapi *api, struct hsrv_conn *c, const struct apipath *t,
			const char *who, const char *body, size_t len)
{
	static const char *const keys[] = {NULL};
	char err[ERR_MAX];
	struct backend *b;
	int rc;
	struct pool_rt *p = target_of(api, c, t, &b);
	json_t *doc = p ? read_body(c, body, len, keys) : NULL;
	if (!doc)
		return;
	json_decref(doc);
	switch (t->call) {
	case APIPATH_REMOVE:
		rc = manage_remove(p, b, who, err, sizeof(err));
		break;
	case APIPATH_DRAIN:
		rc = manage_set_state(p, b, BACKEND_DRAINING, who, err, sizeof(err));
		break;
	case APIPATH_DISABLE:
		rc = manage_set_state(p, b, BACKEND_DISABLED, who, err, sizeof(err));
		break;
	default:
		rc = manage_set_state(p, b, BACKEND_ENABLED, who, err, sizeof(err));
		break;
	}
	if (rc < 0)
		reply_error(c, status_of(rc), "", err);
	else
		reply_changed(api, c, 200, b, NULL);
}

/* POST /api/maintenance {"on": true|false, "retry_after_s": N} */
static void call_maintenance(struct adminapi *api, struct hsrv_conn *c, const char *who,
			     const char *body, size_t len)
{
	static const char *const keys[] = {"on", "retry_after_s", NULL};
	char err[ERR_MAX];
	unsigned retry = MANAGE_RETRY_DEFAULT;
	int given;
	json_t *doc = read_body(c, body, len, keys);
	if (!doc)
		return;
	const json_t *on = json_object_get(doc, "on");
	if (!json_is_boolean(on)) {
		reply_error(c, 400, "", "\"on\": true or false is required");
		goto out;
	}
	if (read_uint(c, doc, "retry_after_s", 1, MANAGE_RETRY_MAX, &retry, &given) < 0)
		goto out;
	int rc =
	    manage_set_maintenance(api->rt, json_is_true(on) ? retry : 0, who, err, sizeof(err));
	if (rc < 0)
		reply_error(c, status_of(rc), "", err);
	else
		reply_changed(api, c, 200, NULL,
			      json_pack("{s:o*}", "maintenance", maintenance_json(api->rt)));
out:
	json_decref(doc);
}

/* Append <key>=<value> percent-encoded to <f> (cache/purge.h reads it back). */
static void form_put(FILE *f, const char *key, const char *value)
{
	fprintf(f, "%s%s=", ftell(f) ? "&" : "", key);
	for (const unsigned char *s = (const unsigned char *)value; *s; s++)
		if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		    (*s >= '0' && *s <= '9') || strchr("-._~/:", *s))
			fputc(*s, f);
		else
			fprintf(f, "%%%02X", *s);
}

/* POST /api/cache/purge {"uri": U} | {"prefix": P} (each with "host" when a path) |
 * {"tag": T} | {"all": true}: the parameters of POST /cache/purge, as JSON. */
static void call_purge(struct adminapi *api, struct hsrv_conn *c, const char *who, const char *body,
		       size_t len)
{
	static const char *const keys[] = {"uri", "prefix", "host", "tag", "all", NULL};
	char err[ERR_MAX];
	char *form = NULL;
	size_t flen = 0;
	const char *key;
	json_t *v, *doc = read_body(c, body, len, keys);
	if (!doc)
		return;
	if (!api->rt->cache) {
		reply_error(c, 404, "",
			    "no response cache here: the configuration has no cache: "
			    "section");
		goto out;
	}
	FILE *f = open_memstream(&form, &flen);
	if (!f) {
		reply_error(c, 500, "", "out of memory");
		goto out;
	}
	json_object_foreach(doc, key, v)
	{
		if (!strcmp(key, "all") ? !json_is_true(v) : !json_is_string(v)) {
			fclose(f);
			snprintf(err, sizeof(err), "\"%s\" must be %s", key,
				 strcmp(key, "all") ? "a string" : "true");
			reply_error(c, 400, "", err);
			goto out;
		}
		form_put(f, key, strcmp(key, "all") ? json_string_value(v) : "1");
	}
	fclose(f);
	struct cache_purge *p = &api->purge;
	if (cache_purge_parse(p, form, flen, err, sizeof(err)) < 0) {
		reply_error(c, 400, "", err);
		goto out;
	}
	p->field = api->tag_field;
	p->field_len = strlen(api->tag_field);
	size_t n = cache_purge_match(api->rt->cache, cache_purge_pred, p);
	log_info("admin: %s: purge %s: purged %zu", who, form, n);
	reply(c, 200, "", json_pack("{s:I}", "purged", (json_int_t)n));
out:
	free(form);
	json_decref(doc);
}

/* POST /api/reload: the proxy's hook, when it registered one. */
static void call_reload(struct adminapi *api, struct hsrv_conn *c, const char *who)
{
	char err[ERR_MAX] = "";
	if (!api->reload) {
		reply_error(c, 501, "",
			    "this proxy cannot reload through the admin API (send it "
			    "SIGHUP)");
		return;
	}
	log_info("admin: %s: reload", who);
	int rc = api->reload(api->reload_arg, err, sizeof(err));
	if (rc < 0)
		reply_error(c, rc == -EINVAL ? 400 : 500, "", err[0] ? err : strerror(-rc));
	else
		reply(c, 200, "", json_pack("{s:b}", "reloaded", 1));
}

void adminapi_serve(struct adminapi *api, struct hsrv_conn *c, const struct http_head *req,
		    const char *body, size_t body_len)
{
	struct apipath t;
	char who[64], allow[64];
	const char *why;
	int rc = apipath_parse(req->meth, req->path.p, req->path.len, &t, &why);
	if (rc == 405) {
		snprintf(allow, sizeof(allow), "Allow: %s\r\n", t.allow);
		reply_error(c, 405, allow, why);
		return;
	}
	if (rc) {
		reply_error(c, rc, "", why);
		return;
	}
	hsrv_peer(c, who, sizeof(who));
	switch (t.call) {
	case APIPATH_BACKENDS:
		list_backends(api, c);
		break;
	case APIPATH_ADD:
		call_add(api, c, &t, who, body, body_len);
		break;
	case APIPATH_CHANGE:
		call_change(api, c, &t, who, body, body_len);
		break;
	case APIPATH_REMOVE:
	case APIPATH_DRAIN:
	case APIPATH_ENABLE:
	case APIPATH_DISABLE:
		call_action(api, c, &t, who, body, body_len);
		break;
	case APIPATH_MAINTENANCE_GET:
		reply(c, 200, "Cache-Control: no-store\r\n",
		      json_pack("{s:o*}", "maintenance", maintenance_json(api->rt)));
		break;
	case APIPATH_MAINTENANCE_SET:
		call_maintenance(api, c, who, body, body_len);
		break;
	case APIPATH_PURGE:
		call_purge(api, c, who, body, body_len);
		break;
	case APIPATH_RELOAD:
		call_reload(api, c, who);
		break;
	}
}
