/* SPDX-License-Identifier: Apache-2.0 */
/* Writer-side helpers the waitq tests share (not part of the library). */
#ifndef KVA_TEST_WAITQ_HELPERS_H
#define KVA_TEST_WAITQ_HELPERS_H

#include <stddef.h>

#include <kvadmit/lockfree/waitq.h>

/* The head, unlinked (what a scheduler does with first + unlink). */
static inline struct kva_waitq_node *pop_head(struct kva_waitq *q)
{
	struct kva_waitq_node *n = kva_waitq_first(q);
	if (n)
		kva_waitq_unlink(q, n);
	return n;
}

static inline size_t waitq_count(struct kva_waitq *q)
{
	size_t n = 0;
	for (struct kva_waitq_node *x = kva_waitq_first(q); x; x = kva_waitq_next(q, x))
		n++;
	return n;
}

#endif
