/*
 * h2mem.c - nghttp2_mem's four calls, each the smallmem call of the same name.
 */
#include "http/h2mem.h"

static void *mem_malloc(size_t size, void *ud)
{
	return smallmem_alloc(ud, size);
}

static void mem_free(void *p, void *ud)
{
	smallmem_free(ud, p);
}

static void *mem_calloc(size_t nmemb, size_t size, void *ud)
{
	return smallmem_calloc(ud, nmemb, size);
}

static void *mem_realloc(void *p, size_t size, void *ud)
{
	return smallmem_realloc(ud, p, size);
}

void h2mem_init(nghttp2_mem *mem, struct smallmem *m)
{
	*mem = (nghttp2_mem){.mem_user_data = m,
			     .malloc = mem_malloc,
			     .free = mem_free,
			     .calloc = mem_calloc,
			     .realloc = mem_realloc};
}
