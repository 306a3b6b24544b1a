/* SPDX-License-Identifier: Apache-2.0 */
/* big_table: see big_table.h. */
#define _GNU_SOURCE
#include "big_table.h"

#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *kvf_big_table_new(struct kvf_big_table *t, size_t bytes)
{
	size_t len = bytes + (bytes >= HUGE_PAGE ? HUGE_PAGE : 0); /* room to align */
	/* anonymous memory comes zeroed: every slot empty */
	void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return NULL;
	uintptr_t at = (uintptr_t)map;
	if (bytes >= HUGE_PAGE)
		at = (at + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	(void)madvise((void *)at, bytes, MADV_HUGEPAGE); /* a hint */
	t->map = map;
	t->map_len = len;
	return (void *)at;
}

void kvf_big_table_free(struct kvf_big_table *t)
{
	if (t->map)
		munmap(t->map, t->map_len);
	t->map = NULL;
	t->map_len = 0;
}
