/* SPDX-License-Identifier: Apache-2.0 */
/*
 * big_table: zeroed memory for a flat table probed at random (the index and
 * the readers' table), mapped once and aligned to 2 MiB, with MADV_HUGEPAGE
 * where the kernel offers it: every probe is a random access into a table
 * larger than the caches, and with 4 KiB pages each would also miss the
 * TLB (a page walk, and in a virtual machine a nested one). A hint only:
 * 4 KiB pages work too.
 */
#ifndef KVA_FLEET_BIG_TABLE_H
#define KVA_FLEET_BIG_TABLE_H

#include <stddef.h>

struct kvf_big_table {
	void *map; /* the mapping, and its length (bytes + room to align) */
	size_t map_len;
};

/* bytes of zeroes at a 2 MiB boundary when bytes >= 2 MiB; NULL without
 * memory (t untouched then). */
void *kvf_big_table_new(struct kvf_big_table *t, size_t bytes);
/* Unmaps t's memory (nothing when t holds none). */
void kvf_big_table_free(struct kvf_big_table *t);

#endif
