/* SPDX-License-Identifier: Apache-2.0 */
/* tickets.pml: freelist.pml for the tagged reclaim-ticket free list
 * (slab_reclaim.c ticket_push, slab_reclaim.c kva__slab_ticket_get). */
#define TICKETS 1
#include "freelist.pml"
