/*
 * glob.h - matching a name against a shell-style pattern: '*' stands for any run of bytes
 * (none included), '?' for one byte, every other byte for itself (case counts). No classes,
 * no escapes: the config refuses '[', ']' and '\' in a pattern so that nobody writes one
 * expecting them (conf/schema.c). Used for routes[].match.model.
 */
#ifndef ACCELNET_CORE_GLOB_H
#define ACCELNET_CORE_GLOB_H

#include <stddef.h>

/* Does s[0..n) match the NUL-terminated pattern <pat>? Linear in n per star, no recursion. */
int glob_match(const char *pat, const char *s, size_t n);

#endif
