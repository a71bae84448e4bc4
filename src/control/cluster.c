/*
 * cluster.c - the sync thread behind cluster.h, with hiredis's blocking API: the thread is
 * the only one that talks to Redis, so it may wait (never longer than timeout_ms a call);
 * replies are parsed by hiredis, never here.
 *
 * One sync is one pipeline: EVALSHA of the members script (this instance's id scored with
 * an expiry in a sorted set, the expired taken out and so are entries expiring later than any
 * instance's would, the set's size answered, believed up to cluster.max_instances), then EVALSHA
 * of the charge script for every key collected from every shared limit (guard/rlsync.h:
 * the key's shared TAT moved by the cost sent, its debt answered). Both scripts read Redis's
 * own clock (TIME), so the instances' clocks never meet; what comes back is a duration.
 * A key is PREFIX "rl:" ROUTE ":" LIMIT ":" 16 hex digits of the tenant's hash (the same hash
 * on every instance: xxh3 of the identity, unseeded), ROUTE the route's name or its index;
 * instances sharing a Redis are meant to share one config.
 *
 * Every pool's capped backends (max_concurrency) share their slots: every sync ends with, per
 * pool, EVALSHA of the slots script, which records the requests this instance has in flight
 * to each such backend and those waiting in its queue for it (by name, in a hash per pool,
 * PREFIX "slotshare:" POOL, each field expiring as a live-set entry does) and deals the
 * backend's slots out between the instances there, in one place, so that two never count the
 * same free slot as theirs: in proportion to what each wants (in flight plus waiting), the
 * slots nobody wants split evenly, and never a slot another still holds (SLOTS_LUA says how).
 * What this instance is not dealt goes into the backend's <elsewhere>, which the pick counts
 * against the cap (runtime/pool.h); within its deal the instance's own queue takes a freed
 * slot at once. When a deal gives it more, this thread asks the pool's queue to grant them
 * (admission_grant), since no local release will. A slot that moves between instances waits
 * for its holder's script to let it go and the taker's to take it, so between two syncs the
 * thread runs the slots script alone SLOT_TICKS - 1 times, when a deal may have changed
 * (requests wait here, or this instance took or let go a slot since it last said), and it
 * does not wait for a tick when it need not: a request that begins to wait here, or a slot let
 * go here while others wait for the backend, wakes it through the pool queue's eventfd
 * (pool_queue_wake); a deal that gave it less is said again at once (so its grant in Redis
 * falls with it); and the script wakes the instances concerned through Redis (PUBLISH on a
 * channel per pool and instance, which a second connection subscribes to): the waiters when
 * this one let slots go, the holders when more requests wait here. A slot freed at one
 * instance so reaches another's waiting request in a few round trips, not two ticks. A wake
 * runs the script for its pool only, and at most once each WAKE_GAP_NS (1 ms): under a
 * standing queue every request and every release wakes the thread, and anyone may PUBLISH on
 * a channel, but those that come within the gap are folded into one run, so the runs stay
 * bounded (a thousand a second an instance), not one per Redis round trip.
 * While Redis is away each backend's <elsewhere> is what the others held of late (their
 * requests in flight, smoothed), never all of its slots; once the thread stops (a reload: the
 * generation drains), 0.
 *
 * Pools with session: share their sessions the same way: every sync sends what each pool's
 * table learned since (its feed, policy/stick.h: a session's hash and its backend's name)
 * to a stream per pool (PREFIX "sess:" POOL) and puts the other instances' entries into its
 * own table; a backend is named, never numbered, so instances agree on it by name only. The
 * key goes as the table holds it, its top bit saying whether a session header or cookie
 * named it or a response id did (policy/stick.h), so the two kinds never meet in Redis
 * either.
 *
 * A reply that is no integer, an error, a timeout or a lost connection ends the sync: the
 * connection is dropped and the counts it carried are lost (as while Redis is away).
 *
 * What Redis answers is believed only as far as it cannot loosen a limit beyond what each
 * instance would enforce alone: a request rate's debt is never taken below the last one
 * answered for that key, less the time since, plus what this instance sent (its shared TAT
 * as last seen is kept per slot, on this thread: 16 bytes a slot, 1 MiB a limit), so a Redis that
 * restarted empty, or whose keys a writer deletes, hands no instance a fresh burst (a token budget
 * has no such floor: any instance gives tokens back). The live set's count is believed up to
 * cluster.max_instances. docs/security.md says what a Redis writer can and cannot do.
 */
#include "control/cluster.h"
#include "control/slotwant.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/secret.h"
#include "guard/rlsync.h"
#include "policy/stick.h"
#include "proxy/admission.h"
#include "runtime/llm.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define SYNC_KEYS 4096	       /* keys one sync carries at most; the rest go next time */
#define RECONNECT_MS 1000      /* the least time between two connects */
#define PASSWORD_MAX 512       /* bytes of cluster.password_file */
#define KEY_MAX 192	       /* a Redis key of ours */
#define LIMITS_PER_ROUTE 3     /* per_tenant, per_route, tokens_per_minute */
#define PREFIXES_PER_SYNC 512  /* prompts' prefixes one sync sends at most, all pools */
#define STREAM_MAX 10000       /* a pool's stream keeps about this many (XADD MAXLEN ~) */
#define STREAM_READ "512"      /* entries one sync reads of each stream, at most */
#define SLOT_TICKS 4	       /* slots scripts a sync_ms: the sync's, and 3 alone between */
#define WAKE_GAP_NS 1000000    /* the least time between two slots runs a wake asks for */
#define SUB_RETRY_MAX_MS 60000 /* the most time between two tries of the wakes' subscription */
#define SUB_PING_MS 15000 /* a PING on a subscription silent this long; no answer as long: gone */

/* KEYS[1]: the bucket; ARGV[1]: the cost in microseconds (signed). The rule of
 * rlsync_charge(); the TAT is kept while it lies ahead (and a second longer). */
static const char CHARGE_LUA[] = "local t = redis.call('TIME')\n"
				 "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
				 "local tat = tonumber(redis.call('GET', KEYS[1]) or 0) or 0\n"
				 "if tat < now then tat = now end\n"
				 "tat = tat + tonumber(ARGV[1])\n"
				 "if tat < now then tat = now end\n"
				 "redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX',\n"
				 "           math.floor((tat - now) / 1000) + 1000)\n"
				 "return tat - now\n";

/* KEYS[1]: a tenant's spend in a window; ARGV[1]: micro-units charged (signed); ARGV[2]:
 * seconds it is kept. Never below 0 (a refund of what a lost key held). The total answered. */
static const char SPEND_LUA[] = "local v = redis.call('INCRBY', KEYS[1], ARGV[1])\n"
				"if v < 0 then redis.call('SET', KEYS[1], 0) v = 0 end\n"
				"redis.call('EXPIRE', KEYS[1], ARGV[2])\n"
				"return v\n";

/* The longest an instance's entry in the live set may count (its expiry ahead of Redis's
 * clock): 3 x sync_ms + 2 x timeout_ms + 1 s at the largest values the config allows. An
 * entry further ahead was written by no instance. */
#define MEMBER_TTL_MAX_MS (3 * 10000 + 2 * 60000 + 1000)

/* KEYS[1]: the live set; ARGV[1]: this instance; ARGV[2]: how long it counts, in ms;
 * ARGV[3]: MEMBER_TTL_MAX_MS. Entries expired or further ahead than any instance writes
 * are taken out; the count answered is of those left. */
static const char MEMBERS_LUA[] =
    "local t = redis.call('TIME')\n"
    "local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[1])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. (ms + tonumber(ARGV[3])), '+inf')\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return redis.call('ZCARD', KEYS[1])\n";

#define SESSIONS_PER_SYNC 4096 /* sessions one sync sends at most, all pools */

/* KEYS[1]: a pool's slots; KEYS[2]: its line (when each instance's oldest waiter for each
 * backend began to wait, on Redis's clock: "ID NAME" = "SINCE EXPIRY"); ARGV[1]: this instance;
 * ARGV[2]: how long its figures stand, in ms; ARGV[3]: MEMBER_TTL_MAX_MS; then, for each capped
 * backend, its name, the requests this instance has in flight to it, those waiting here for
 * it, its max_concurrency, the slots this instance may fill now (the deal it last applied:
 * cap less what it counts elsewhere) and how long its oldest waiter for it has waited (ms, 0:
 * none). (The line is a hash of its own so that the fields of KEYS[1] stay as a version
 * without it reads them.)
 * Each instance's figures are kept as the field "ID NAME" = "INFLIGHT WAITING GRANT EXPIRY",
 * GRANT the more of the new deal and the one it may still be filling by: a deal that gives an
 * instance less is applied there after this script has run, and until its next run says so
 * the slots it may fill are its own (its in flight, read before the script, may grow in
 * between). Expired fields (and those further ahead than any instance writes) are taken out.
 *
 * The backend's slots are dealt out here, in one place, so two instances never count one free
 * slot as theirs: each instance wants its in flight plus its waiting; when all want no more
 * than the slots, each gets what it wants and the rest is split evenly (the remainder to the
 * first ids), else each gets its share in proportion to what it wants (the slots left by
 * rounding down to the instances in the order their oldest waiters began to wait, then,
 * among those with none waiting, to the largest remainders, the most waiting and the first
 * ids: a slot the instances contend for goes to the oldest waiter at any of them, so their
 * queues are served as one line). What
 * the others hold (the more of their grant and their in flight) is never given: a slot moves
 * once its holder's next run of this script has let it go. A run that lets go of slots
 * another instance's requests wait for (what this instance holds, the more of its in flight
 * and its grant, is less than its field said), or that says more requests wait here than its
 * field did, publishes a wake on KEY " wake " ID to each instance waiting for the slots, or
 * holding some, whose thread runs this script at once: the holders learn that others wait
 * (and let a slot go the moment it frees), the waiters take what was let go. A wake is sent
 * only for a change of the caller's own figures, so two instances never wake each other in
 * turn for nothing. (pcall: a Redis whose ACL refuses PUBLISH still deals; the ticks carry.)
 * Answered: for each backend sent, in order, the slots this instance may fill, the others' requests
 * in flight there and those waiting for it at the others. */
static const char SLOTS_LUA[] =
    "local t = redis.call('TIME')\n"
    "local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local id, exp = ARGV[1], ms + tonumber(ARGV[2])\n"
    "local per, out, mine, wake = {}, {}, {}, {}\n"
    "local all = redis.call('HGETALL', KEYS[1])\n"
    "for k = 1, #all, 2 do\n"
    "  local sp = string.find(all[k], ' ', 1, true)\n"
    "  local f, w, g, e = string.match(all[k + 1], '^(%d+) (%d+) (%d+) (%d+)$')\n"
    "  if not sp or not f or tonumber(e) < ms or tonumber(e) > ms + tonumber(ARGV[3]) then\n"
    "    redis.call('HDEL', KEYS[1], all[k])\n"
    "  elseif string.sub(all[k], 1, sp - 1) == id then\n"
    "    mine[string.sub(all[k], sp + 1)] = {math.max(tonumber(f), tonumber(g)), tonumber(w)}\n"
    "  else\n"
    "    local name = string.sub(all[k], sp + 1)\n"
    "    per[name] = per[name] or {}\n"
    "    table.insert(per[name], {string.sub(all[k], 1, sp - 1), tonumber(f), tonumber(w),\n"
    "                             tonumber(g)})\n"
    "  end\n"
    "end\n"
    "local line = {}\n"
    "all = redis.call('HGETALL', KEYS[2])\n"
    "for k = 1, #all, 2 do\n"
    "  local q, e = string.match(all[k + 1], '^(%d+) (%d+)$')\n"
    "  if not q or tonumber(e) < ms or tonumber(e) > ms + tonumber(ARGV[3]) then\n"
    "    redis.call('HDEL', KEYS[2], all[k])\n"
    "  else\n"
    "    line[all[k]] = tonumber(q)\n"
    "  end\n"
    "end\n"
    "for i = 4, #ARGV - 5, 6 do\n"
    "  local f, w, cap = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])\n"
    "  local applied, age = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])\n"
    "  local since = 0\n"
    "  if age > 0 then\n"
    "    since = ms - age\n"
    "    redis.call('HSET', KEYS[2], id .. ' ' .. ARGV[i], string.format('%d %d', since, exp))\n"
    "  else\n"
    "    redis.call('HDEL', KEYS[2], id .. ' ' .. ARGV[i])\n"
    "  end\n"
    "  local l, want = per[ARGV[i]] or {}, f + w\n"
    "  local total, held, ahead, give, busy, owait = want, 0, 0, 0, 0, 0\n"
    "  for _, o in ipairs(l) do\n"
    "    total = total + o[2] + o[3]\n"
    "    busy = busy + o[2]\n"
    "    owait = owait + o[3]\n"
    "    held = held + math.max(o[2], o[4])\n"
    "  end\n"
    "  if total <= cap then\n"
    "    local spare = cap - total\n"
    "    for _, o in ipairs(l) do\n"
    "      if o[1] < id then ahead = ahead + 1 end\n"
    "    end\n"
    "    give = want + math.floor(spare / (#l + 1))\n"
    "    if ahead < spare % (#l + 1) then give = give + 1 end\n"
    "  else\n"
    "    local left, r = cap - math.floor(cap * want / total), (cap * want) % total\n"
    "    for _, o in ipairs(l) do\n"
    "      local ro = (cap * (o[2] + o[3])) % total\n"
    "      left = left - math.floor(cap * (o[2] + o[3]) / total)\n"
    "      local os, first = line[o[1] .. ' ' .. ARGV[i]] or 0, false\n"
    "      if os > 0 or since > 0 then\n"
    "        first = os > 0 and (since == 0 or os < since or (os == since and o[1] < id))\n"
    "      else\n"
    "        first = ro > r or (ro == r and (o[3] > w or (o[3] == w and o[1] < id)))\n"
    "      end\n"
    "      if first then ahead = ahead + 1 end\n"
    "    end\n"
    "    give = math.floor(cap * want / total)\n"
    "    if ahead < left then give = give + 1 end\n"
    "  end\n"
    "  if give > cap - held then give = cap - held end\n"
    "  if give < 0 then give = 0 end\n"
    "  redis.call('HSET', KEYS[1], id .. ' ' .. ARGV[i],\n"
    "             string.format('%d %d %d %d', f, w, math.max(give, applied), exp))\n"
    "  local was = mine[ARGV[i]] or {0, 0}\n"
    "  for _, o in ipairs(l) do\n"
    "    if (o[3] > 0 and math.max(f, give, applied) < was[1]) or\n"
    "       (math.max(o[2], o[4]) > 0 and w > was[2]) then wake[o[1]] = true end\n"
    "  end\n"
    "  out[#out + 1] = give\n"
    "  out[#out + 1] = busy\n"
    "  out[#out + 1] = owait\n"
    "end\n"
    "for o in pairs(wake) do\n"
    "  redis.pcall('PUBLISH', KEYS[1] .. ' wake ' .. o, '1')\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
    "return out\n";

/* What the store last said of the key in a slot: its shared TAT, on our clock. */
struct shared_seen {
	uint64_t key, tat_us;
};

/* One shared limit of one route. */
struct shared_limit {
	struct ratelimit *rl;
	char prefix[KEY_MAX - 20]; /* its keys, less the 16 hex digits */
	size_t cursor;		   /* where the next collect goes on */
	struct shared_seen *seen;  /* RL_SLOTS for a request rate (its debt's floor), or NULL */
};

/* One route's shared budget. */
struct shared_budget {
	struct route_budget *b;
	char prefix[KEY_MAX - 48]; /* its keys, less WINDOW ":" and the 16 hex digits */
	size_t cursor;		   /* where the next collect goes on */
};

/* A balance: llm pool whose backends learn from routing: its stream, read up to <last_id>. */
struct shared_pool {
	struct pool_rt *p;
	char key[KEY_MAX];
	char last_id[48];
	size_t next_backend; /* whose feed the next sync drains first */
	uint64_t *cursor;    /* per backend: its feed's reader count */
};

/* A pool's backend slots (max_concurrency) as shared by the instances: the backends sent in the
 * last sync (<which>, <nsent> of them, each with the cap it was sent with), the arguments of
 * its script (three numbers a backend), and per backend the other instances' requests in
 * flight there, as last answered and smoothed over time (x 16, every tick, whether the script
 * ran or not: runs come with the load, at wakes, so a smoothing by runs would weigh the busy
 * moments more), for while Redis is away. */
struct shared_slots {
	struct pool_rt *p;
	char key[KEY_MAX];
	size_t *which, nsent;
	unsigned *cap;
	unsigned *last; /* per backend: its requests in flight as last sent */
	const char **argv;
	char (*num)[24];
	uint32_t *smooth16;
	uint32_t *busy16;	  /* per backend: the others' in flight as Redis last said (x 16) */
	char wake[KEY_MAX + 104]; /* the channel its script wakes this instance on */
	char line[KEY_MAX];	  /* the hash of each instance's oldest waiter per backend */
	uint32_t *age;		  /* per backend: how long its oldest waiter here has waited */
	int fd;			  /* its queue's wake (pool_queue_watch), or -1 */
	int due;		  /* woken (its queue, its channel, a deal that gave less) */
	size_t turn;		  /* the backend its loose waiters' remainder goes first to */
};

/* A pool with session: its table's feed, read up to <cursor>, and its stream, up to <last_id>. */
struct shared_sessions {
	struct pool_rt *p;
	char key[KEY_MAX];
	char last_id[48];
	uint64_t cursor;
};

struct cluster {
	const struct conf_cluster *conf;
	struct shared_pool *pools;
	size_t npools;
	struct shared_sessions *sess;
	size_t nsess;
	const char **sess_argv;	    /* XREAD's: 4 + 2 per pool with session */
	struct shared_slots *slots; /* one per pool */
	size_t nslots;
	struct shared_slots **slots_sent; /* whose script each of the last sync's was */
	size_t nslots_sent;
	uint64_t rnd;			     /* for the grants the cluster thread makes */
	char slots_ttl[24], slots_bound[24]; /* SLOTS_LUA's ARGV[2] and ARGV[3] */
	uint64_t hash[PREFIX_FEED_BLOCKS];   /* one entry, on its way out or in */
	const char **argv;		     /* XREAD's: 4 + 2 per pool */
	struct shared_limit *lim;
	size_t nlim;
	struct shared_budget *bud;
	size_t nbud;
	struct budget_sync_item *bitems; /* SYNC_KEYS, and whose budget each is */
	struct shared_budget **bitem_of;
	char id[96];	       /* this instance in the live set */
	char members[KEY_MAX]; /* the live set's key */
	unsigned member_ttl_ms;
	redisContext *redis;
	/* subscribed to every pool's wake channel: another instance let go of a slot this one's
	 * requests wait for; NULL while not connected (the ticks go on regardless) */
	redisContext *sub;
	uint64_t last_sub_ms;
	uint64_t sub_retry_ms; /* after a failed try, the wait before the next (doubled), else 0 */
	uint64_t sub_heard_ms; /* when the subscription last said anything */
	uint64_t sub_ping_ms;  /* when a PING went on it still unanswered, or 0 */
	int sub_said;	       /* why there are no wakes is logged (once, till they are back) */
	int stop_fd;	       /* cluster_stop() writes it: the thread's wait ends */
	int shrank; /* a deal just gave this instance less: say so at once (the slots go) */
	uint64_t last_run_ns; /* when the slots script last ran (CLOCK_MONOTONIC) */
	struct pollfd *pfd;   /* the thread's wait: stop_fd, the queues' wakes, the subscription */
	char charge_sha[48], members_sha[48], spend_sha[48], slots_sha[48];
	uint64_t last_connect_ms;
	int state; /* -1: not known yet, 0: away, 1: there */
	/* Redis back after it was away: until then, or until it counts as many instances as
	 * before (<settle_n>), a deal gives no more than going on alone would (a Redis back
	 * empty deals its first caller every slot before the others said what they hold) */
	uint64_t settle_until_ms;
	unsigned settle_n;
	char why[192]; /* what went wrong last */
	unsigned instances;
	struct rlsync_item *items; /* SYNC_KEYS, and whose limit each is */
	struct shared_limit **item_lim;
	struct cluster_stats stats;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stopping;
};

const struct cluster_stats *cluster_stats(const struct cluster *c)
{
	return &c->stats;
}

/* Tell every shared limit whether Redis is there (<up>) and how many instances it counts. */
static void tell_limits(struct cluster *c, int up)
{
	for (size_t i = 0; i < c->nlim; i++)
		rlsync_set_instances(c->lim[i].rl, up, c->instances);
}

/* Redis is there (<up>) or not (<why>): the shares, the metric, one line per change. */
static void set_state(struct cluster *c, int up, const char *why)
{
	atomic_store(&c->stats.up, up);
	if (up == c->state)
		return;
	unsigned n = c->instances ? c->instances : 1;
	tell_limits(c, up);
	if (up)
		log_info("cluster: limits are shared through Redis at %s (%u instance%s live)",
			 c->conf->redis, n, n == 1 ? "" : "s");
	else
		log_warn("cluster: Redis at %s: %s; each shared limit is enforced here alone at "
			 "1/%u of its rate until Redis answers again",
			 c->conf->redis, why, n);
	c->state = up;
}

static void failed(struct cluster *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(struct cluster *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
}

static void drop(struct cluster *c)
{
	if (c->redis)
		redisFree(c->redis);
	c->redis = NULL;
}

static void drop_sub(struct cluster *c)
{
	if (c->sub)
		redisFree(c->sub);
	c->sub = NULL;
}

/* The reply of one command on <ctx>, or NULL with c->why set. */
static redisReply *command(struct cluster *c, redisContext *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *r = redisvCommand(ctx, fmt, ap);
	va_end(ap);
	if (!r) {
		failed(c, "%s", ctx->errstr[0] ? ctx->errstr : "no reply");
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		failed(c, "%s", r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* SCRIPT LOAD <src> into sha[48]. */
static int load_script(struct cluster *c, const char *src, char *sha)
{
	redisReply *r = command(c, c->redis, "SCRIPT LOAD %s", src);
	if (!r)
		return -EIO;
	int ok = r->type == REDIS_REPLY_STRING && r->len < 48;
	if (ok)
		snprintf(sha, 48, "%s", r->str);
	else
		failed(c, "SCRIPT LOAD did not answer a digest");
	freeReplyObject(r);
	return ok ? 0 : -EIO;
}

static int authenticate(struct cluster *c, redisContext *ctx)
{
	uint8_t pw[PASSWORD_MAX];
	size_t len = 0;
	const char *why = NULL;
	int rc = secret_load(c->conf->password_file, pw, sizeof(pw), &len, &why);
	if (rc < 0) {
		failed(c, "password_file %s: %s", c->conf->password_file,
		       why ? why : strerror(-rc));
		return rc;
	}
	redisReply *r = command(c, ctx, "AUTH %b", pw, len);
	OPENSSL_cleanse(pw, sizeof(pw));
	if (!r)
		return -EACCES;
	freeReplyObject(r);
	return 0;
}

static int connect_redis(struct cluster *c)
{
	struct timeval tv = {.tv_sec = c->conf->timeout_ms / 1000,
			     .tv_usec = (c->conf->timeout_ms % 1000) * 1000};
	c->last_connect_ms = clock_now_ms();
	c->redis = redisConnectWithTimeout(c->conf->host, (int)c->conf->port, tv);
	if (!c->redis) {
		failed(c, "out of memory");
		return -ENOMEM;
	}
	if (c->redis->err) {
		failed(c, "cannot connect: %s", c->redis->errstr);
		goto fail;
	}
	if (redisSetTimeout(c->redis, tv) != REDIS_OK) {
		failed(c, "cannot set the socket timeouts");
		goto fail;
	}
	if (c->conf->password_file && authenticate(c, c->redis) < 0)
		goto fail;
	if (load_script(c, CHARGE_LUA, c->charge_sha) < 0 ||
	    load_script(c, MEMBERS_LUA, c->members_sha) < 0 ||
	    load_script(c, SPEND_LUA, c->spend_sha) < 0 ||
	    load_script(c, SLOTS_LUA, c->slots_sha) < 0)
		goto fail;
	if (c->state == 0) { /* back: the others reconnect within RECONNECT_MS */
		c->settle_until_ms = c->last_connect_ms + RECONNECT_MS + 3ull * c->conf->sync_ms;
		c->settle_n = c->instances;
	}
	return 0;
fail:
	drop(c);
	return -EIO;
}

/* The subscription could not be made, for <why>: said once (till it is made), tried again
 * later and later (RECONNECT_MS doubled up to SUB_RETRY_MAX_MS: each try is a connect, an
 * AUTH and a refused SUBSCRIBE, an entry in Redis's ACL LOG, the thread's ticks waiting). */
static void sub_failed(struct cluster *c, const char *why)
{
	if (!c->sub_said)
		log_warn(
		    "cluster: no wakes through Redis at %s:%u (%s): a slot let go at another "
		    "instance reaches the requests waiting here at the ticks (every %u ms), not at "
		    "once; tried again every %d s at most",
		    c->conf->host, (unsigned)c->conf->port, why, c->conf->sync_ms / SLOT_TICKS,
		    SUB_RETRY_MAX_MS / 1000);
	c->sub_said = 1;
	c->sub_retry_ms = c->sub_retry_ms ? 2 * c->sub_retry_ms : RECONNECT_MS;
	if (c->sub_retry_ms > SUB_RETRY_MAX_MS)
		c->sub_retry_ms = SUB_RETRY_MAX_MS;
	drop_sub(c);
}

/* The second connection, subscribed to every pool's wake channel (SLOTS_LUA publishes on it).
 * On failure none (sub_failed): the ticks carry the slots alone, as before it. It waits at
 * most a tick (sync_ms / SLOT_TICKS, 10 ms at least, timeout_ms at most) for each answer, so
 * that a Redis slow to answer it holds the ticks back little. */
static void connect_sub(struct cluster *c)
{
	unsigned ms = c->conf->sync_ms / SLOT_TICKS;
	ms = ms < 10 ? 10 : ms;
	ms = ms > c->conf->timeout_ms ? c->conf->timeout_ms : ms;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	char why[sizeof(c->why)], was[sizeof(c->why)];
	c->last_sub_ms = clock_now_ms();
	c->sub = redisConnectWithTimeout(c->conf->host, (int)c->conf->port, tv);
	if (!c->sub || c->sub->err) {
		snprintf(why, sizeof(why), "%s", c->sub ? c->sub->errstr : "out of memory");
		goto fail;
	}
	if (redisSetTimeout(c->sub, tv) != REDIS_OK) {
		snprintf(why, sizeof(why), "cannot set the socket timeouts");
		goto fail;
	}
	redisEnableKeepAlive(c->sub); /* (a peer or NAT that forgets it: noticed) */
	if (c->conf->password_file) {
		memcpy(was, c->why, sizeof(was)); /* (c->why is the main connection's) */
		int rc = authenticate(c, c->sub);
		snprintf(why, sizeof(why), "%s", c->why);
		memcpy(c->why, was, sizeof(was));
		if (rc < 0)
			goto fail;
	}
	for (size_t i = 0; i < c->nslots; i++)
		redisAppendCommand(c->sub, "SUBSCRIBE %s", c->slots[i].wake);
	for (size_t i = 0; i < c->nslots; i++) {
		redisReply *r = NULL;
		if (redisGetReply(c->sub, (void **)&r) != REDIS_OK || !r) {
			snprintf(why, sizeof(why), "SUBSCRIBE: %s",
				 c->sub->errstr[0] ? c->sub->errstr : "no reply");
			goto fail;
		}
		int ok = r->type == REDIS_REPLY_ARRAY;
		if (r->type == REDIS_REPLY_ERROR) /* e.g. an ACL user with no channels */
			snprintf(why, sizeof(why), "SUBSCRIBE refused: %.120s", r->str);
		else if (!ok)
			snprintf(why, sizeof(why), "SUBSCRIBE: an answer of type %d", r->type);
		freeReplyObject(r);
		if (!ok)
			goto fail;
	}
	if (c->sub_said)
		log_info("cluster: wakes through Redis are on again");
	c->sub_said = 0;
	c->sub_retry_ms = 0;
	c->sub_heard_ms = clock_now_ms();
	c->sub_ping_ms = 0;
	return;
fail:
	sub_failed(c, why);
}

/* A tick: a subscription that said nothing for SUB_PING_MS is asked a PING; one that has not
 * answered it SUB_PING_MS later is gone (a connection dropped on the way and never closed:
 * no wake would come): it is made again. */
static void sub_check(struct cluster *c)
{
	if (!c->sub)
		return;
	uint64_t now = clock_now_ms();
	if (c->sub_ping_ms) {
		if (now - c->sub_ping_ms >= SUB_PING_MS) {
			log_warn("cluster: the wakes' connection to Redis did not answer a PING in "
				 "%d s: "
				 "made again",
				 SUB_PING_MS / 1000);
			drop_sub(c);
		}
		return;
	}
	if (now - c->sub_heard_ms < SUB_PING_MS)
		return;
	int done = 0;
	if (redisAppendCommand(c->sub, "PING") != REDIS_OK) {
		drop_sub(c);
		return;
	}
	while (!done) /* (a few bytes: the socket takes them, or its send timeout ends it) */
		if (redisBufferWrite(c->sub, &done) != REDIS_OK) {
			drop_sub(c);
			return;
		}
	c->sub_ping_ms = now;
}

/* A message on the wake channel <ch> (named by Redis, as subscribed): its pool is due. */
static void wake_pool(struct cluster *c, const redisReply *ch)
{
	for (size_t i = 0; i < c->nslots; i++)
		if (ch->len == strlen(c->slots[i].wake) &&
		    !memcmp(ch->str, c->slots[i].wake, ch->len))
			c->slots[i].due = 1;
}

/* The wake channels have something to read: read it (a message says only that its pool's deal
 * may have changed; its payload is never read). On a lost connection none. */
static void read_sub(struct cluster *c)
{
	if (redisBufferRead(c->sub) != REDIS_OK) {
		drop_sub(c);
		return;
	}
	for (;;) {
		redisReply *r = NULL;
		if (redisGetReplyFromReader(c->sub, (void **)&r) != REDIS_OK) {
			drop_sub(c);
			return;
		}
		if (!r)
			return;
		c->sub_heard_ms = clock_now_ms(); /* (a message, or the answer to a PING) */
		c->sub_ping_ms = 0;
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    !strcmp(r->element[0]->str, "message") &&
		    r->element[1]->type == REDIS_REPLY_STRING)
			wake_pool(c, r->element[1]);
		freeReplyObject(r);
	}
}

/* Append the keys of every shared limit to the pipeline: how many. */
static size_t append_limits(struct cluster *c, uint64_t now_us)
{
	size_t n = 0;
	for (size_t i = 0; i < c->nlim && n < SYNC_KEYS; i++) {
		struct shared_limit *l = &c->lim[i];
		size_t got = rlsync_collect(l->rl, now_us, &l->cursor, c->items + n, SYNC_KEYS - n);
		for (size_t k = n; k < n + got; k++) {
			c->item_lim[k] = l;
			redisAppendCommand(c->redis, "EVALSHA %s 1 %s%016llx %lld", c->charge_sha,
					   l->prefix, (unsigned long long)c->items[k].key,
					   (long long)rlsync_cost_us(l->rl, c->items[k].units));
		}
		n += got;
	}
	return n;
}

/* Append the tenants' spends of every shared budget to the pipeline: how many. */
static size_t append_budgets(struct cluster *c, uint64_t now_s)
{
	size_t n = 0;
	for (size_t i = 0; i < c->nbud && n < SYNC_KEYS; i++) {
		struct shared_budget *sb = &c->bud[i];
		size_t got =
		    budget_collect(sb->b, now_s, &sb->cursor, c->bitems + n, SYNC_KEYS - n);
		uint64_t keep_s = sb->b->conf->window_s + 60;
		for (size_t k = n; k < n + got; k++) {
			c->bitem_of[k] = sb;
			redisAppendCommand(
			    c->redis, "EVALSHA %s 1 %s%llu:%016llx %lld %llu", c->spend_sha,
			    sb->prefix, (unsigned long long)c->bitems[k].window,
			    (unsigned long long)c->bitems[k].key, (long long)c->bitems[k].micros,
			    (unsigned long long)keep_s);
		}
		n += got;
	}
	return n;
}

/* A sync failed before the store answered items <from>..<n> of the budgets: their counts go
 * back to be sent again (the store may have added some already: charged twice, refused
 * early, never free). */
static void budgets_unsent(struct cluster *c, size_t from, size_t n)
{
	for (size_t k = from; k < n; k++)
		atomic_fetch_add_explicit(&c->bitems[k].slot->pending, c->bitems[k].micros,
					  memory_order_relaxed);
}

/* Append an XADD for each prompt sent to the shared pools' backends since the last sync
 * (their feeds, in turns), and one XREAD of every pool's stream: how many XADDs. */
static size_t append_prefixes(struct cluster *c)
{
	size_t sent = 0;
	for (size_t i = 0; i < c->npools; i++) {
		struct shared_pool *sp = &c->pools[i];
		size_t nb = sp->p->nbackends;
		for (size_t k = 0; k < nb && sent < PREFIXES_PER_SYNC; k++) {
			size_t j = (sp->next_backend + k) % nb;
			struct backend *b = &sp->p->backends[j];
			size_t n;
			while (b->llm && b->llm->feed && sent < PREFIXES_PER_SYNC &&
			       (n = prefix_feed_take(b->llm->feed, &sp->cursor[j], c->hash)) > 0) {
				redisAppendCommand(c->redis, "XADD %s MAXLEN ~ %d * i %s b %s h %b",
						   sp->key, STREAM_MAX, c->id, b->name, c->hash,
						   n * sizeof(uint64_t));
				sent++;
			}
		}
		sp->next_backend = nb ? (sp->next_backend + 1) % nb : 0;
	}
	if (c->npools) {
		const char **argv = c->argv;
		argv[0] = "XREAD";
		argv[1] = "COUNT";
		argv[2] = STREAM_READ;
		argv[3] = "STREAMS";
		for (size_t i = 0; i < c->npools; i++) {
			argv[4 + i] = c->pools[i].key;
			argv[4 + c->npools + i] = c->pools[i].last_id;
		}
		redisAppendCommandArgv(c->redis, (int)(4 + 2 * c->npools), argv, NULL);
	}
	return sent;
}

/* Append an XADD for each session the pools' tables learned since the last sync, and one
 * XREAD of their streams: how many XADDs. */
static size_t append_sessions(struct cluster *c)
{
	size_t sent = 0;
	for (size_t i = 0; i < c->nsess; i++) {
		struct shared_sessions *ss = &c->sess[i];
		uint64_t key;
		unsigned idx;
		while (sent < SESSIONS_PER_SYNC &&
		       stick_feed_take(ss->p->stick, &ss->cursor, &key, &idx)) {
			if (idx >= ss->p->nbackends)
				continue;
			redisAppendCommand(c->redis, "XADD %s MAXLEN ~ %d * i %s b %s k %b",
					   ss->key, STREAM_MAX, c->id, ss->p->backends[idx].name,
					   &key, sizeof(key));
			sent++;
		}
	}
	if (c->nsess) {
		const char **argv = c->sess_argv;
		argv[0] = "XREAD";
		argv[1] = "COUNT";
		argv[2] = STREAM_READ;
		argv[3] = "STREAMS";
		for (size_t i = 0; i < c->nsess; i++) {
			argv[4 + i] = c->sess[i].key;
			argv[4 + c->nsess + i] = c->sess[i].last_id;
		}
		redisAppendCommandArgv(c->redis, (int)(4 + 2 * c->nsess), argv, NULL);
	}
	return sent;
}

/* The requests of <ss>'s queue waiting for <b>, the <k>th of its <ncapped> capped backends:
 * balance: llm's count of those waiting for it, plus its part of those waiting for no backend
 * in particular (<loose>), each of which is counted on one backend only (control/slotwant.h),
 * the remainder from the pool's turn on. */
static unsigned waiting_for(const struct shared_slots *ss, const struct backend *b, unsigned loose,
			    size_t k, size_t ncapped)
{
	unsigned own = b->llm ? atomic_load_explicit(&b->llm->waiting, memory_order_relaxed) : 0;
	return slotwant_waiting(own, loose, k, ncapped, ss->turn);
}

/* Append, for each pool with a capped backend (<only_due>: each woken one), the requests this
 * instance has in flight to each such backend and those waiting here for it, by name, and its
 * cap; Redis answers the slots of each that this instance may fill. */
static void append_slots(struct cluster *c, int only_due)
{
	c->nslots_sent = 0;
	c->shrank = 0;
	c->last_run_ns = clock_now_ns();
	for (size_t i = 0; i < c->nslots; i++) {
		struct shared_slots *ss = &c->slots[i];
		size_t argc = 8, ncapped = 0;
		if (only_due && !ss->due)
			continue;
		ss->due = 0;
		unsigned homed = 0, queued = pool_queue_len(&ss->p->queue);
		ss->nsent = 0;
		for (size_t j = 0; j < ss->p->nbackends; j++) {
			struct backend *b = &ss->p->backends[j];
			if (b->llm)
				homed +=
				    atomic_load_explicit(&b->llm->waiting, memory_order_relaxed);
			ncapped += backend_cap(b) && backend_present(b);
		}
		unsigned loose = queued > homed ? queued - homed : 0;
		if (queued)
			admission_oldest(ss->p, clock_now_ms(), ss->age);
		else
			memset(ss->age, 0, ss->p->nbackends * sizeof(*ss->age));
		for (size_t j = 0; j < ss->p->nbackends; j++) {
			struct backend *b = &ss->p->backends[j];
			unsigned cap = backend_cap(b);
			if (!cap || !backend_present(b))
				continue; /* (a spare slot of the admin API has no name yet) */
			char(*num)[24] = &ss->num[5 * ss->nsent];
			ss->last[j] =
			    atomic_load_explicit(&b->share->inflight, memory_order_relaxed);
			snprintf(num[0], sizeof(num[0]), "%u", ss->last[j]);
			snprintf(num[1], sizeof(num[1]), "%u",
				 waiting_for(ss, b, loose, ss->nsent, ncapped));
			snprintf(num[2], sizeof(num[2]), "%u", cap);
			unsigned away = atomic_load_explicit(&b->elsewhere, memory_order_relaxed);
			snprintf(num[3], sizeof(num[3]), "%u", away < cap ? cap - away : 0);
			snprintf(num[4], sizeof(num[4]), "%u", ss->age[j]);
			ss->argv[argc++] = b->name;
			ss->argv[argc++] = num[0];
			ss->argv[argc++] = num[1];
			ss->argv[argc++] = num[2];
			ss->argv[argc++] = num[3];
			ss->argv[argc++] = num[4];
			ss->cap[ss->nsent] = cap;
			ss->which[ss->nsent++] = j;
		}
		if (!ss->nsent)
			continue;
		ss->turn++; /* (the loose waiters' remainder goes on from the next backend) */
		ss->argv[0] = "EVALSHA";
		ss->argv[1] = c->slots_sha;
		ss->argv[2] = "2";
		ss->argv[3] = ss->key;
		ss->argv[4] = ss->line;
		ss->argv[5] = c->id;
		ss->argv[6] = c->slots_ttl;
		ss->argv[7] = c->slots_bound;
		redisAppendCommandArgv(c->redis, (int)argc, ss->argv, NULL);
		c->slots_sent[c->nslots_sent++] = ss;
	}
}

/* Set <b>'s slots held elsewhere to <n>, at most <cap> less <keep> of them; 1 when that freed
 * some here, -1 when it took some away. */
static int set_elsewhere(struct backend *b, uint64_t n, unsigned keep)
{
	unsigned cap = backend_cap(b);
	unsigned most = cap > keep ? cap - keep : 0;
	unsigned v = n < most ? (unsigned)n : most;
	unsigned was = atomic_exchange_explicit(&b->elsewhere, v, memory_order_relaxed);
	return v < was ? 1 : v > was ? -1 : 0;
}

/* A backend's slots held elsewhere while Redis is away: the others' requests in flight there
 * of late, from its smoothed count (x 16), rounded down. Not the deals: an instance's deal is
 * its share of the moment, and a share frozen at it leaves slots idle at one instance while
 * requests for them wait at another; counted so, the instances together may pass the cap by
 * a slot or two, and no slot is left idle. */
static unsigned alone(uint32_t smooth16)
{
	return smooth16 / 16;
}

/* A reply's integer, or 0 when it is none or negative. */
static uint64_t count_of(const redisReply *e)
{
	return e->type == REDIS_REPLY_INTEGER && e->integer > 0 ? (uint64_t)e->integer : 0;
}

/* Redis answered the slots this instance may fill of each backend of <ss> sent (the rest of
 * each one's cap, as sent, is held elsewhere), the others' requests in flight there and those
 * waiting there for it. A deal that gives less sets c->shrank: the thread runs the script
 * again at once, so the field's grant (the deal it may still be filling by) falls to the new
 * one and the slots reach the others now, not a tick later. */
static void take_slots(struct cluster *c, struct shared_slots *ss, const redisReply *r)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 * ss->nsent)
		return;
	int freed = 0, settle = clock_now_ms() < c->settle_until_ms && c->instances < c->settle_n;
	for (size_t k = 0; k < ss->nsent; k++) {
		unsigned cap = ss->cap[k];
		uint64_t mine = count_of(r->element[3 * k]), busy = count_of(r->element[3 * k + 1]);
		uint64_t owait = count_of(r->element[3 * k + 2]);
		uint64_t n = mine < cap ? cap - mine : 0;
		size_t j = ss->which[k];
		struct backend *b = &ss->p->backends[j];
		uint32_t s16 = busy > 65535 ? 65535u * 16 : (uint32_t)busy * 16;
		if (settle) /* (what it held away stands meanwhile) */
			n = n < alone(ss->smooth16[j]) ? alone(ss->smooth16[j]) : n;
		else
			ss->busy16[j] = s16;
		atomic_store_explicit(&b->others_waiting, owait > 65535 ? 65535u : (unsigned)owait,
				      memory_order_relaxed);
		int moved = set_elsewhere(b, n, 0);
		freed |= moved > 0;
		if (moved < 0)
			c->shrank = ss->due = 1;
	}
	if (freed) { /* the queue's waiters may take what the others let go */
		c->rnd = c->rnd * 6364136223846793005ull + 1442695040888963407ull;
		admission_grant(ss->p, clock_now_ms(), c->rnd);
	}
}

/* Redis is away: each backend's slots held elsewhere are what the others held of late
 * (smoothed, alone()), and never all of them: the instances, evenly loaded, keep about
 * their shares, and each keeps at least one slot of each backend. */
static void slots_alone(struct cluster *c)
{
	for (size_t i = 0; i < c->nslots; i++) {
		struct shared_slots *ss = &c->slots[i];
		int freed = 0;
		for (size_t j = 0; j < ss->p->nbackends; j++) {
			struct backend *b = &ss->p->backends[j];
			atomic_store_explicit(&b->others_waiting, 0, memory_order_relaxed);
			freed |= set_elsewhere(b, alone(ss->smooth16[j]), 1) > 0;
		}
		if (freed) {
			c->rnd = c->rnd * 6364136223846793005ull + 1442695040888963407ull;
			admission_grant(ss->p, clock_now_ms(), c->rnd);
		}
	}
}

/* A bulk string's bytes, or NULL when <r> is none. */
static const char *str_of(const redisReply *r, size_t *len)
{
	if (!r || r->type != REDIS_REPLY_STRING)
		return NULL;
	*len = r->len;
	return r->str;
}

/* What one stream entry [id, [i, ID, b, NAME, KEY, VALUE]] says: the backend's name, and the
 * value of the field named <key>. */
struct entry {
	const char *name, *val;
	size_t nlen, vlen;
};

/* Read entry <e> into *out, its id kept in last_id (<cap> bytes: where the next read starts).
 * 0, or -1 for an entry that is malformed or this instance's own. */
static int stream_entry(struct cluster *c, const redisReply *e, char *last_id, size_t cap, char key,
			struct entry *out)
{
	size_t len, wlen = 0;
	const char *id, *who = NULL;
	if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || !(id = str_of(e->element[0], &len)))
		return -1;
	if (len < cap) {
		memcpy(last_id, id, len);
		last_id[len] = '\0';
	}
	const redisReply *f = e->element[1];
	*out = (struct entry){0};
	if (f->type != REDIS_REPLY_ARRAY || f->elements % 2)
		return -1;
	for (size_t k = 0; k + 1 < f->elements; k += 2) {
		const char *fld = str_of(f->element[k], &len);
		if (!fld || len != 1)
			continue;
		if (fld[0] == 'i')
			who = str_of(f->element[k + 1], &wlen);
		else if (fld[0] == 'b')
			out->name = str_of(f->element[k + 1], &out->nlen);
		else if (fld[0] == key)
			out->val = str_of(f->element[k + 1], &out->vlen);
	}
	if (!who || !out->name || !out->val || (wlen == strlen(c->id) && !memcmp(who, c->id, wlen)))
		return -1;
	return 0;
}

/* One entry [id, [i, ID, b, NAME, h, HASHES]] of <sp>'s stream: another instance's prompt
 * goes into the index of the backend it names. Malformed entries are passed over. */
static void take_entry(struct cluster *c, struct shared_pool *sp, const redisReply *e)
{
	struct entry en;
	if (stream_entry(c, e, sp->last_id, sizeof(sp->last_id), 'h', &en) < 0 || !en.vlen ||
	    en.vlen % sizeof(uint64_t) || en.vlen > sizeof(c->hash))
		return; /* malformed, or our own */
	for (size_t j = 0; j < sp->p->nbackends; j++) {
		struct backend *b = &sp->p->backends[j];
		if (strlen(b->name) != en.nlen || memcmp(b->name, en.name, en.nlen) || !b->llm ||
		    b->llm->exact)
			continue;
		memcpy(c->hash, en.val, en.vlen);
		prefix_index_insert(b->llm->prefix, c->hash, en.vlen / sizeof(uint64_t));
		atomic_fetch_add(&c->stats.received, 1);
		return;
	}
}

/* One entry [id, [i, ID, b, NAME, k, KEY]] of a session stream: another instance's session
 * goes into <ss>'s table, to the backend of that name (none of that name: passed over). */
static void take_session(struct cluster *c, struct shared_sessions *ss, const redisReply *e)
{
	struct entry en;
	if (stream_entry(c, e, ss->last_id, sizeof(ss->last_id), 'k', &en) < 0 ||
	    en.vlen != sizeof(uint64_t))
		return; /* malformed, or our own */
	uint64_t key;
	memcpy(&key, en.val, sizeof(key));
	for (size_t j = 0; j < ss->p->nbackends; j++) {
		struct backend *b = &ss->p->backends[j];
		if (strlen(b->name) != en.nlen || memcmp(b->name, en.name, en.nlen))
			continue;
		stick_put(ss->p->stick, key, (unsigned)j, (uint32_t)(clock_now_ms() / 1000), 0);
		atomic_fetch_add(&c->stats.sessions_received, 1);
		return;
	}
}

/* XREAD's answer: nil (nothing new), or [[key, [entry, ...]], ...]: each entry of a stream
 * goes to <take>(c, its key, the key's length, the entry). */
static void take_xread(struct cluster *c, const redisReply *r,
		       void (*take)(struct cluster *, const char *, size_t, const redisReply *))
{
	if (r->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *s = r->element[i];
		size_t len;
		const char *key;
		if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
		    !(key = str_of(s->element[0], &len)) ||
		    s->element[1]->type != REDIS_REPLY_ARRAY)
			continue;
		for (size_t k = 0; k < s->element[1]->elements; k++)
			take(c, key, len, s->element[1]->element[k]);
	}
}

/* An entry of the session stream <key>: to the pool whose stream it is. */
static void take_session_of(struct cluster *c, const char *key, size_t len, const redisReply *e)
{
	for (size_t p = 0; p < c->nsess; p++)
		if (strlen(c->sess[p].key) == len && !memcmp(c->sess[p].key, key, len))
			take_session(c, &c->sess[p], e);
}

/* An entry of the prompt stream <key>: to the pool whose stream it is. */
static void take_entry_of(struct cluster *c, const char *key, size_t len, const redisReply *e)
{
	for (size_t p = 0; p < c->npools; p++)
		if (strlen(c->pools[p].key) == len && !memcmp(c->pools[p].key, key, len))
			take_entry(c, &c->pools[p], e);
}

/* The next reply of the pipeline: 0, or -EIO with c->why said (an error reply too). */
static int next_reply(struct cluster *c, redisReply **r)
{
	*r = NULL;
	if (redisGetReply(c->redis, (void **)r) != REDIS_OK || !*r) {
		failed(c, "%s", c->redis->errstr[0] ? c->redis->errstr : "no reply");
		return -EIO;
	}
	if ((*r)->type == REDIS_REPLY_ERROR) {
		failed(c, "Redis answered %s", (*r)->str);
		freeReplyObject(*r);
		return -EIO;
	}
	return 0;
}

/* The live instances Redis counts (<n>), as far as they are believed: at least 1 (this one),
 * at most cluster.max_instances (a count past it is said, once a minute). */
static unsigned believed(struct cluster *c, long long n)
{
	if (n < 1)
		return 1;
	if (n > (long long)c->conf->max_instances) {
		log_warn_every(60000,
			       "cluster: Redis counts %lld live instances, more than "
			       "cluster.max_instances; %u believed (is something else writing %s?)",
			       n, c->conf->max_instances, c->members);
		return c->conf->max_instances;
	}
	return (unsigned)n;
}

/* The store answered <debt_us> for item <i>: merged into its bucket. A request rate's debt
 * is never taken below what the store said last, less the time since, plus what we sent
 * (rlsync_debt_floor): a store that forgets gives an instance no more than it has alone. */
static void apply_debt(struct cluster *c, size_t i, uint64_t debt_us)
{
	struct shared_limit *l = c->item_lim[i];
	const struct rlsync_item *it = &c->items[i];
	uint64_t now_us = clock_now_ns() / 1000;
	if (l->seen) {
		struct shared_seen *s = &l->seen[it->slot - l->rl->slots];
		uint64_t floor = rlsync_debt_floor(s->key == it->key ? s->tat_us : 0, now_us,
						   rlsync_cost_us(l->rl, it->units));
		/* (a little under it is the time a reply takes; far under it, a forgetful store) */
		if (debt_us + 1000ull * (c->conf->sync_ms + c->conf->timeout_ms) < floor)
			log_warn_every(60000,
				       "cluster: Redis answered a debt of %llu us for %s%016llx, "
				       "%llu us less than this instance alone has sent: the key "
				       "was lost (deleted, a Redis restart?); the debt is kept",
				       (unsigned long long)debt_us, l->prefix,
				       (unsigned long long)it->key,
				       (unsigned long long)(floor - debt_us));
		if (debt_us < floor)
			debt_us = floor;
		s->key = it->key;
		s->tat_us = now_us + debt_us;
	}
	rlsync_apply(l->rl, it, debt_us, c->instances, now_us);
}

/* One sync: the live set, every collected key, the prompts' prefixes sent and the others'
 * read, in one pipeline. */
static int sync_once(struct cluster *c)
{
	uint64_t now_us = clock_now_ns() / 1000;
	redisAppendCommand(c->redis, "EVALSHA %s 1 %s %s %u %u", c->members_sha, c->members, c->id,
			   c->member_ttl_ms, (unsigned)MEMBER_TTL_MAX_MS);
	uint64_t now_s = (uint64_t)time(NULL);
	size_t n = append_limits(c, now_us);
	size_t nb = append_budgets(c, now_s);
	size_t sent = append_prefixes(c);
	size_t prefixes_end = 1 + n + nb + sent + (c->npools ? 1 : 0);
	size_t sessions = append_sessions(c);
	size_t slots_from = prefixes_end + sessions + (c->nsess ? 1 : 0);
	append_slots(c, 0);
	size_t total = slots_from + c->nslots_sent;
	redisReply *r = NULL;
	for (size_t k = 0; k < total; k++) {
		if (next_reply(c, &r) < 0) {
			budgets_unsent(c, k > n + 1 ? k - n - 1 : 0, nb);
			return -EIO;
		}
		if (k <= n + nb && r->type != REDIS_REPLY_INTEGER) {
			failed(c, "a script answered no integer");
			freeReplyObject(r);
			budgets_unsent(c, k > n ? k - n - 1 : 0, nb);
			return -EIO;
		}
		if (k == 0) {
			unsigned was = c->instances;
			c->instances = believed(c, r->integer);
			atomic_store(&c->stats.instances, c->instances);
			if (c->state == 1 && was != c->instances)
				tell_limits(c, 1);
		} else if (k <= n) {
			long long v = r->integer;
			apply_debt(c, k - 1, v > 0 ? (uint64_t)v : 0);
		} else if (k <= n + nb) {
			long long v = r->integer;
			const struct budget_sync_item *it = &c->bitems[k - n - 1];
			budget_apply(c->bitem_of[k - n - 1]->b, it, v > 0 ? (uint64_t)v : 0, now_s);
		} else if (k == prefixes_end - 1 && c->npools) {
			take_xread(c, r, take_entry_of);
		} else if (k == slots_from - 1 && c->nsess) {
			take_xread(c, r, take_session_of);
		} else if (k >= slots_from) {
			take_slots(c, c->slots_sent[k - slots_from], r);
		}
		freeReplyObject(r);
	}
	atomic_fetch_add(&c->stats.keys, n);
	atomic_fetch_add(&c->stats.sent, sent);
	atomic_fetch_add(&c->stats.sessions_sent, sessions);
	return 0;
}

/* One turn of the thread: sync if it can (connecting when due), else go on alone. */
static void turn(struct cluster *c)
{
	if (!c->redis && (c->state < 0 || clock_now_ms() - c->last_connect_ms >= RECONNECT_MS) &&
	    connect_redis(c) < 0) {
		atomic_fetch_add(&c->stats.failed, 1);
		set_state(c, 0, c->why);
	}
	if (c->redis) {
		if (sync_once(c) == 0) {
			atomic_fetch_add(&c->stats.syncs, 1);
			set_state(c, 1, NULL);
			if (!c->sub && c->nslots_sent &&
			    clock_now_ms() - c->last_sub_ms >= c->sub_retry_ms)
				connect_sub(c);
			return;
		}
		atomic_fetch_add(&c->stats.failed, 1);
		drop(c);
		drop_sub(c);
		set_state(c, 0, c->why);
	}
	for (size_t i = 0; i < c->nlim; i++)
		rlsync_discard(c->lim[i].rl);
	slots_alone(c);
}

/* Whether a deal of slots may have changed since the last sync: requests wait in a pool
 * with capped backends (for a slot another instance may let go), or this instance's
 * requests in flight to one of them are not what it last sent (it let one go, or took one). */
static int slots_moved(const struct cluster *c)
{
	for (size_t i = 0; i < c->nslots; i++) {
		const struct shared_slots *ss = &c->slots[i];
		if (ss->due)
			return 1;
		if (!ss->nsent)
			continue;
		if (pool_queue_len(&ss->p->queue))
			return 1;
		for (size_t k = 0; k < ss->nsent; k++) {
			const struct backend *b = &ss->p->backends[ss->which[k]];
			if (atomic_load_explicit(&b->share->inflight, memory_order_relaxed) !=
			    ss->last[ss->which[k]])
				return 1;
		}
	}
	return 0;
}

/* Between two syncs: the slots script alone, for every pool when a deal may have changed
 * (slots_moved), or, <woken>, for the pools woken (their queue, their channel, a deal that
 * gave less), so a slot one instance lets go reaches another's waiting requests in a fraction
 * of a sync. */
static void slots_turn(struct cluster *c, int woken)
{
	if (!c->redis || c->state != 1 || (!woken && !slots_moved(c)))
		return;
	append_slots(c, woken);
	for (size_t k = 0; k < c->nslots_sent; k++) {
		redisReply *r = NULL;
		if (next_reply(c, &r) < 0) {
			atomic_fetch_add(&c->stats.failed, 1);
			drop(c);
			drop_sub(c);
			set_state(c, 0, c->why);
			slots_alone(c);
			return;
		}
		take_slots(c, c->slots_sent[k], r);
		freeReplyObject(r);
	}
}

static int stopping(struct cluster *c)
{
	pthread_mutex_lock(&c->mu);
	int v = c->stopping;
	pthread_mutex_unlock(&c->mu);
	return v;
}

/* Wait until <next> (CLOCK_MONOTONIC) or cluster_stop(); meanwhile, each time a pool's queue
 * says a deal may have changed here (a slot freed that others wait for, a request began to
 * wait) or another instance's script says on the pool's channel that it let go of a slot this
 * one's requests wait for, the slots script for that pool (and once more when its deal gave
 * less), at most one such run each WAKE_GAP_NS: the wakes that come meanwhile (a standing
 * queue's every request and release, a flood on a channel) are folded into the next run. */
static void wait_until(struct cluster *c, const struct timespec *next)
{
	struct pollfd *pf = c->pfd;
	for (;;) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t left = (int64_t)(next->tv_sec - now.tv_sec) * 1000000000 +
			       (next->tv_nsec - now.tv_nsec);
		if (left <= 0)
			return; /* (the tick runs what is due) */
		int due = 0;
		for (size_t i = 0; i < c->nslots; i++)
			due |= c->slots[i].due;
		if (due) {
			uint64_t t = clock_now_ns();
			int64_t gap = (int64_t)(c->last_run_ns + WAKE_GAP_NS - t);
			if (gap <= 0) {
				/* (due: what moved may have moved back since the last run, a slot
				 * taken and let go, and the others still wait to hear it) */
				slots_turn(c, 1);
				if (c->shrank)
					slots_turn(c, 1);
				if (c->redis && c->state == 1)
					continue;
				for (size_t i = 0; i < c->nslots; i++)
					c->slots[i].due = 0; /* (no Redis: the ticks go on alone) */
				continue;
			}
			if (gap < left)
				left = gap;
		}
		size_t n = 0;
		pf[n++] = (struct pollfd){.fd = c->stop_fd, .events = POLLIN};
		for (size_t i = 0; i < c->nslots; i++)
			if (c->slots[i].fd >= 0)
				pf[n++] = (struct pollfd){.fd = c->slots[i].fd, .events = POLLIN};
		size_t sub_at = n;
		if (c->sub)
			pf[n++] = (struct pollfd){.fd = c->sub->fd, .events = POLLIN};
		struct timespec ts = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
		if (ppoll(pf, n, &ts, NULL) <= 0)
			continue; /* the time is up (checked above), or a signal */
		if (pf[0].revents)
			return;
		for (size_t i = 0, k = 1; i < c->nslots; i++) {
			if (c->slots[i].fd < 0)
				continue;
			uint64_t v;
			if (pf[k++].revents) {
				c->slots[i].due = 1;
				if (read(c->slots[i].fd, &v, sizeof(v)) < 0) {
					/* EAGAIN: another read took it */
				}
			}
		}
		if (c->sub && sub_at < n && pf[sub_at].revents)
			read_sub(c);
	}
}

/* A tick: each backend's smoothed count of the others' requests in flight moves an eighth of
 * the way to what Redis last said (while Redis is there, and not while it settles back). */
static void smooth_slots(struct cluster *c)
{
	if (c->state != 1 || (clock_now_ms() < c->settle_until_ms && c->instances < c->settle_n))
		return;
	for (size_t i = 0; i < c->nslots; i++) {
		struct shared_slots *ss = &c->slots[i];
		for (size_t j = 0; j < ss->p->nbackends; j++)
			ss->smooth16[j] +=
			    (uint32_t)(((int64_t)ss->busy16[j] - ss->smooth16[j]) / 8);
	}
}

static void *cluster_main(void *arg)
{
	struct cluster *c = arg;
	log_set_thread_tag("cluster");
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	unsigned tick = 0;
	while (!stopping(c)) {
		if (tick++ % SLOT_TICKS == 0)
			turn(c);
		else
			slots_turn(c, 0);
		if (c->shrank)
			slots_turn(c, 1);
		smooth_slots(c);
		sub_check(c);
		uint64_t ns =
		    (uint64_t)next.tv_nsec + (uint64_t)c->conf->sync_ms * 1000000u / SLOT_TICKS;
		next.tv_sec += (time_t)(ns / 1000000000u);
		next.tv_nsec = (long)(ns % 1000000000u);
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec ||
		    (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
			next =
			    now; /* a slow sync: the next one at once, not a burst of catching up */
		wait_until(c, &next);
	}
	if (c->redis) {
		redisReply *r = redisCommand(c->redis, "ZREM %s %s", c->members, c->id);
		if (r)
			freeReplyObject(r);
	}
	drop(c);
	drop_sub(c);
	return NULL;
}

static int add_limit(struct cluster *c, struct ratelimit *rl, const struct conf *conf, size_t i,
		     const char *what)
{
	struct shared_limit *l = &c->lim[c->nlim++];
	/* a request rate's debt has a floor; tokens are given back, by any instance: none */
	if (strcmp(what, "tokens_per_minute") != 0 &&
	    !(l->seen = calloc(RL_SLOTS, sizeof(*l->seen))))
		return -ENOMEM;
	const char *prefix = conf->cluster.key_prefix ? conf->cluster.key_prefix : "accelnet:";
	l->rl = rl;
	l->cursor = 0;
	if (conf->routes[i].name)
		snprintf(l->prefix, sizeof(l->prefix), "%srl:%.64s:%s:", prefix,
			 conf->routes[i].name, what);
	else
		snprintf(l->prefix, sizeof(l->prefix), "%srl:%zu:%s:", prefix, i, what);
	rl->synced = 1;
	return 0;
}

static void cluster_free(struct cluster *c)
{
	for (size_t i = 0; c->pools && i < c->npools; i++)
		free(c->pools[i].cursor);
	free(c->pools);
	free(c->argv);
	free(c->sess);
	free(c->sess_argv);
	for (size_t i = 0; c->slots && i < c->nslots; i++) {
		free(c->slots[i].which);
		free(c->slots[i].cap);
		free(c->slots[i].last);
		free(c->slots[i].argv);
		free(c->slots[i].num);
		free(c->slots[i].smooth16);
		free(c->slots[i].age);
		free(c->slots[i].busy16);
	}
	free(c->slots);
	free(c->slots_sent);
	free(c->pfd);
	for (size_t i = 0; c->lim && i < c->nlim; i++)
		free(c->lim[i].seen);
	free(c->lim);
	free(c->items);
	free(c->item_lim);
	free(c->bud);
	free(c->bitems);
	free(c->bitem_of);
	if (c->stop_fd >= 0)
		close(c->stop_fd);
	free(c);
}

/* Every pool's backend slots: its key, room for its script's arguments and its smoothed
 * counts. 0 or -ENOMEM. */
static int share_slots(struct cluster *c, struct runtime *rt, const char *prefix)
{
	c->slots = calloc(rt->npools ? rt->npools : 1, sizeof(*c->slots));
	c->slots_sent = calloc(rt->npools ? rt->npools : 1, sizeof(*c->slots_sent));
	c->pfd = calloc(rt->npools + 2, sizeof(*c->pfd));
	if (!c->slots || !c->slots_sent || !c->pfd)
		return -ENOMEM;
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		struct shared_slots *ss = &c->slots[c->nslots++];
		ss->p = p;
		snprintf(ss->key, sizeof(ss->key), "%sslotshare:%.100s", prefix, p->conf->name);
		int fd = pool_queue_watch(&p->queue);
		ss->fd = fd < 0 ? -1 : fd;
		ss->which = calloc(p->nbackends + 1, sizeof(*ss->which));
		ss->cap = calloc(p->nbackends + 1, sizeof(*ss->cap));
		ss->last = calloc(p->nbackends + 1, sizeof(*ss->last));
		ss->argv = calloc(8 + 6 * p->nbackends, sizeof(*ss->argv));
		ss->num = calloc(5 * p->nbackends + 1, sizeof(*ss->num));
		ss->age = calloc(p->nbackends + 1, sizeof(*ss->age));
		snprintf(ss->line, sizeof(ss->line), "%sslotline:%.100s", prefix, p->conf->name);
		ss->smooth16 = calloc(p->nbackends + 1, sizeof(*ss->smooth16));
		ss->busy16 = calloc(p->nbackends + 1, sizeof(*ss->busy16));
		if (!ss->which || !ss->cap || !ss->last || !ss->argv || !ss->num || !ss->smooth16 ||
		    !ss->age || !ss->busy16)
			return -ENOMEM;
	}
	return 0;
}

/* The balance: llm pools of <rt> whose backends learn from routing: their feeds and streams.
 * 0 or -ENOMEM. */
static int share_pools(struct cluster *c, struct runtime *rt, const char *prefix)
{
	if (!(c->pools = calloc(rt->npools ? rt->npools : 1, sizeof(*c->pools))))
		return -ENOMEM;
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		size_t learning = 0;
		for (size_t j = 0; j < p->nbackends; j++) {
			struct backend *b = &p->backends[j];
			if (!b->llm || b->llm->exact)
				continue;
			if (llm_share(b->llm) < 0)
				return -ENOMEM;
			learning++;
		}
		if (!learning)
			continue;
		struct shared_pool *sp = &c->pools[c->npools++];
		sp->p = p;
		snprintf(sp->key, sizeof(sp->key), "%saff:%.100s", prefix, p->conf->name);
		snprintf(sp->last_id, sizeof(sp->last_id), "0-0");
		if (!(sp->cursor = calloc(p->nbackends, sizeof(*sp->cursor))))
			return -ENOMEM;
	}
	c->argv = calloc(4 + 2 * c->npools, sizeof(*c->argv));
	if (!c->argv || !(c->sess = calloc(rt->npools ? rt->npools : 1, sizeof(*c->sess))))
		return -ENOMEM;
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		if (!p->stick)
			continue;
		struct shared_sessions *ss = &c->sess[c->nsess++];
		ss->p = p;
		p->stick->shared = 1; /* (before any worker runs) */
		snprintf(ss->key, sizeof(ss->key), "%ssess:%.100s", prefix, p->conf->name);
		/* from the start: an instance that starts learns the recent sessions */
		snprintf(ss->last_id, sizeof(ss->last_id), "0-0");
	}
	c->sess_argv = calloc(4 + 2 * c->nsess, sizeof(*c->sess_argv));
	if (!c->sess_argv)
		return -ENOMEM;
	return share_slots(c, rt, prefix);
}

int cluster_start(const struct conf *conf, struct runtime *rt, struct route_limits *limits,
		  struct route_budget *budgets, struct cluster **out)
{
	*out = NULL;
	if (!conf->cluster.redis)
		return 0;
	struct cluster *c = calloc(1, sizeof(*c));
	if (c)
		c->stop_fd = -1;
	if (!c || !(c->lim = calloc(conf->nroutes * LIMITS_PER_ROUTE + 1, sizeof(*c->lim))) ||
	    !(c->items = calloc(SYNC_KEYS, sizeof(*c->items))) ||
	    !(c->item_lim = calloc(SYNC_KEYS, sizeof(*c->item_lim))) ||
	    !(c->bud = calloc(conf->nroutes + 1, sizeof(*c->bud))) ||
	    !(c->bitems = calloc(SYNC_KEYS, sizeof(*c->bitems))) ||
	    !(c->bitem_of = calloc(SYNC_KEYS, sizeof(*c->bitem_of)))) {
		log_error("cluster: out of memory");
		if (c)
			cluster_free(c);
		return -ENOMEM;
	}
	c->conf = &conf->cluster;
	c->state = -1;
	if ((c->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		int e = errno;
		log_error("cluster: cannot make its eventfd: %s", strerror(e));
		c->stop_fd = -1;
		cluster_free(c);
		return -e;
	}
	int rc = 0;
	for (size_t i = 0; i < conf->nroutes && !rc; i++) {
		struct route_limits *l = &limits[i];
		if (l->has_tenant)
			rc = add_limit(c, &l->tenant, conf, i, "per_tenant");
		if (!rc && l->has_route)
			rc = add_limit(c, &l->route, conf, i, "per_route");
		if (!rc && l->has_tokens)
			rc = add_limit(c, &l->tokens, conf, i, "tokens_per_minute");
	}
	if (rc < 0) {
		log_error("cluster: out of memory");
		cluster_free(c);
		return -ENOMEM;
	}
	const char *prefix = conf->cluster.key_prefix ? conf->cluster.key_prefix : "accelnet:";
	for (size_t i = 0; i < conf->nroutes; i++) {
		if (!budgets[i].conf)
			continue;
		struct shared_budget *sb = &c->bud[c->nbud++];
		sb->b = &budgets[i];
		if (conf->routes[i].name)
			snprintf(sb->prefix, sizeof(sb->prefix), "%ssp:%.64s:", prefix,
				 conf->routes[i].name);
		else
			snprintf(sb->prefix, sizeof(sb->prefix), "%ssp:%zu:", prefix, i);
		budgets[i].synced = 1;
	}
	snprintf(c->members, sizeof(c->members), "%sinstances", prefix);
	if (share_pools(c, rt, prefix) < 0) {
		log_error("cluster: out of memory");
		cluster_free(c);
		return -ENOMEM;
	}
	char host[64] = "";
	uint32_t rnd = 0;
	if (gethostname(host, sizeof(host) - 1) < 0)
		snprintf(host, sizeof(host), "host");
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)clock_now_ns();
	snprintf(c->id, sizeof(c->id), "%.63s:%ld:%08x", host, (long)getpid(), rnd);
	for (char *q = c->id; *q; q++)
		if (*q == ' ')
			*q = '_'; /* (the slots script splits a field at its first space) */
	for (size_t i = 0; i < c->nslots; i++)
		snprintf(c->slots[i].wake, sizeof(c->slots[i].wake), "%s wake %s", c->slots[i].key,
			 c->id);
	c->member_ttl_ms = 3 * conf->cluster.sync_ms + 2 * conf->cluster.timeout_ms + 1000;
	snprintf(c->slots_ttl, sizeof(c->slots_ttl), "%u", c->member_ttl_ms);
	snprintf(c->slots_bound, sizeof(c->slots_bound), "%u", (unsigned)MEMBER_TTL_MAX_MS);
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	rc = pthread_create(&c->thread, NULL, cluster_main, c);
	if (rc) {
		log_error("cluster: cannot start its thread: %s", strerror(rc));
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		cluster_free(c);
		return -rc;
	}
	*out = c;
	return 0;
}

void cluster_stop(struct cluster *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stopping = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	uint64_t one = 1;
	if (write(c->stop_fd, &one, sizeof(one)) < 0) {
		/* (an eventfd's write fails only when full: a wake is there already) */
	}
	pthread_join(c->thread, NULL);
	/* a generation that drains after a reload counts its own slots only: nothing updates
	 * the others' any more, and a figure frozen high would starve its queue */
	for (size_t i = 0; i < c->nslots; i++) {
		for (size_t j = 0; j < c->slots[i].p->nbackends; j++) {
			struct backend *b = &c->slots[i].p->backends[j];
			atomic_store_explicit(&b->others_waiting, 0, memory_order_relaxed);
			set_elsewhere(b, 0, 0);
		}
		admission_grant(c->slots[i].p, clock_now_ms(), c->rnd + i);
	}
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	cluster_free(c);
}
