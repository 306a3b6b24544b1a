/* SPDX-License-Identifier: Apache-2.0 */
/* tickets.pml: freelist.pml for the tagged reclaim-ticket free list (slab.c:88, slab.c:125). */
#define TICKETS 1
#include "freelist.pml"
