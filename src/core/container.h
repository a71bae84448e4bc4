/*
 * container.h - container_of(): from a member embedded in an object (a struct loop_io, a
 * struct list_node) back to the object. The one macro everything intrusive needs.
 */
#ifndef ACCELNET_CORE_CONTAINER_H
#define ACCELNET_CORE_CONTAINER_H

#include <stddef.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
