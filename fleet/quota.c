/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quota: a publisher's share of the index cap, and quarantined pairs. See
 * quota.h. I/O thread only.
 */
#define _GNU_SOURCE
#include "quota.h"

#include "holders.h"
#include "watch.h"

void kvf_quota_update(kva_fleet *f)
{
	uint32_t open = 0;
	for (uint32_t i = 0; i < f->npubs; i++)
		open += f->pubs[i].active;
	kvf_holders_set_quota(f, kvf_holders_cap(f) / (open ? open : 1));
}

void kvf_quarantine_report(kva_fleet *f, uint64_t id, uint64_t now)
{
	uint32_t pair;
	if (!kvf_watch_pair(f, id, &pair)) {
		stat_add(f, STAT(failures_unknown), 1);
		return;
	}
	stat_add(f, STAT(failures_reported), 1);
	uint64_t until = deadline_after(now, f->cfg.quarantine_ns);
	for (uint32_t i = 0; i < f->nquarantine; i++)
		if (f->quarantine[i].pair == pair) { /* again: longer */
			f->quarantine[i].until = until;
			return;
		}
	/* a full table gives up the slot after the last one taken */
	uint32_t slot = f->nquarantine < QUARANTINE_SLOTS ? f->nquarantine++ : f->quarantine_next;
	f->quarantine_next = (slot + 1) % QUARANTINE_SLOTS;
	f->quarantine[slot].pair = pair;
	f->quarantine[slot].until = until;
	fleet_log(f, KVA_LOG_WARN,
	          "kvadmit-fleet: publisher %s, medium %u: copies failed, left out of answers",
	          f->pubs[pair >> 8].endpoint ? f->pubs[pair >> 8].endpoint : "?", pair & 0xff);
}

bool kvf_quarantined(kva_fleet *f, uint32_t pair, uint64_t now)
{
	for (uint32_t i = 0; i < f->nquarantine; i++)
		if (f->quarantine[i].pair == pair && f->quarantine[i].until > now)
			return true;
	return false;
}
