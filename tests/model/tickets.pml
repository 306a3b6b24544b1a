/* SPDX-License-Identifier: Apache-2.0 */
/* tickets.pml: freelist.pml for the tagged reclaim-ticket free list
 * (slab.c ticket_push, slab.c ticket_get). */
#define TICKETS 1
#include "freelist.pml"
