/*
 * opt.h - a policy's own config keys, declared as plain data.
 *
 * A balancer (or a queue discipline) lists the keys it reads in a table of struct
 * policy_opt: the key's name, the pool section it sits in, its type and bounds, its default,
 * and where its value goes (an offset into the policy's per-pool state, struct lb_state for
 * a balancer). policy/ knows nothing of YAML or of the config layer: conf/ walks these
 * tables, reads the keys with its rule engine, refuses a key given to a pool whose policy
 * does not declare it, and sets the declared default when a key is not given. So adding a
 * balancer with options touches only its own file and its registration line.
 *
 * Two policies may declare the same key (consistent-hash and prefix-affinity both read
 * hash.balance_factor): they must agree on its type and bounds; each has its own default.
 */
#ifndef ACCELNET_POLICY_OPT_H
#define ACCELNET_POLICY_OPT_H

#include <stddef.h>

enum policy_opt_type {
	POLICY_OPT_UINT, /* unsigned, min..max */
	POLICY_OPT_BOOL, /* unsigned 0 or 1, written true or false */
};

struct policy_opt {
	const char *section; /* the pool section it sits in ("hash"); NULL: a key of the pool */
	const char *name;    /* NULL ends a table */
	enum policy_opt_type type;
	size_t off;	   /* where the value goes in the policy's state */
	unsigned min, max; /* POLICY_OPT_UINT */
	unsigned def;	   /* the value when the key is not given */
};

#endif
