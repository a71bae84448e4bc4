/*
 * sanitize.h - whether this build runs under a sanitizer, as GCC and clang each say it.
 *
 * ACCELNET_ASAN is 1 under AddressSanitizer: the allocators of core/ (buf.c, smallmem.c,
 * slab.c) then poison or bypass what they keep, so that a use after free still shows.
 * ACCELNET_TSAN is 1 under ThreadSanitizer. Tests read them to leave out what measures an
 * allocator the sanitizer replaced.
 */
#ifndef ACCELNET_CORE_SANITIZE_H
#define ACCELNET_CORE_SANITIZE_H

#if defined(__SANITIZE_ADDRESS__)
#define ACCELNET_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ACCELNET_ASAN 1
#endif
#endif
#ifndef ACCELNET_ASAN
#define ACCELNET_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define ACCELNET_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ACCELNET_TSAN 1
#endif
#endif
#ifndef ACCELNET_TSAN
#define ACCELNET_TSAN 0
#endif

#endif
