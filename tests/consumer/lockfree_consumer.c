/* SPDX-License-Identifier: Apache-2.0 */
/* kvadmit::lockfree on its own: an installed header and the static archive. */
#include <stdio.h>

#include <kvadmit/lockfree/capacity.h>

int main(void)
{
	struct kva_capacity c;
	struct kva_credits total = {.pages = 10, .slots = 2, .runs = 4};
	kva_capacity_init(&c, total);
	struct kva_credits want = {.pages = 6, .slots = 1, .runs = 1};
	bool first = kva_capacity_try_reserve(&c, want, 0);
	bool second = kva_capacity_try_reserve(&c, want, 0); /* only 4 pages left */
	struct kva_credits left = kva_capacity_free(&c);
	printf("lockfree capacity: %d %d, %u pages free\n", first, second, (unsigned)left.pages);
	return first && !second && left.pages == 4 ? 0 : 1;
}
