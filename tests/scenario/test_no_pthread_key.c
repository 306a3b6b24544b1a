/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kva_engine_create answers -EAGAIN, as kvadmit.h says, when no pthread key
 * is left for the exit hook that unregisters threads from liburcu (it was
 * -ENOMEM). Its own executable: the key is made once per process, at the
 * first engine, so every key is taken before kvadmit's first call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>

#include "kvadmit/kvadmit.h"

static void create_without_a_pthread_key_is_eagain(void **st)
{
	(void)st;
	static pthread_key_t keys[PTHREAD_KEYS_MAX];
	size_t n = 0;
	while (n < PTHREAD_KEYS_MAX && pthread_key_create(&keys[n], NULL) == 0)
		n++;
	assert_true(n > 0);
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 64;
	int err = 0;
	kva_engine *e = kva_engine_create(&c, &err);
	assert_null(e);
	assert_int_equal(err, -EAGAIN);
	for (size_t i = 0; i < n; i++)
		pthread_key_delete(keys[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(create_without_a_pthread_key_is_eagain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
