/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Event payloads on the heap: directory answers and host-stated local
 * checkpoints (see events.h). Calls only alloc.c.
 */
#include "alloc.h"
#include "events.h"

static size_t answer_bytes(uint32_t cap)
{
	return sizeof(struct kva__answer) + cap * sizeof(kva_checkpoint);
}

struct kva__answer *kva__answer_new(uint32_t cap)
{
	struct kva__answer *a = kva__alloc(answer_bytes(cap));
	if (a) {
		kva_inbox_node_init(&a->ev.node);
		a->ev.type = KVA__EV_ANSWER;
		a->count = 0;
		a->cap = cap;
	}
	return a;
}

void kva__answer_free(struct kva__answer *a)
{
	if (a)
		kva__free(a, answer_bytes(a->cap));
}

struct kva__local *kva__local_new(void)
{
	struct kva__local *l = kva__alloc(sizeof(*l));
	if (l && !(l->spare = kva__answer_new(KVA_MAX_CHECKPOINTS + 1))) {
		kva__free(l, sizeof(*l));
		l = NULL;
	}
	return l;
}

void kva__local_free(struct kva__local *l)
{
	kva__answer_free(l->spare);
	kva__free(l, sizeof(*l));
}
