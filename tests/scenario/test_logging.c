/* SPDX-License-Identifier: Apache-2.0 */
/* Structured log lines (embedding issue): every event a host should hear of
 * arrives as a record with its level, event, request, reason and number,
 * filtered by log_level and rate limited per event. */
#include "scenario.h"

struct rec_log {
	uint32_t n;
	kva_log_record r[256];
	char msg[256][128];
};

static void on_record(void *ctx, const kva_log_record *rec)
{
	struct rec_log *l = ctx;
	if (l->n < 256) {
		l->r[l->n] = *rec;
		snprintf(l->msg[l->n], sizeof(l->msg[0]), "%s", rec->message);
		l->r[l->n].message = l->msg[l->n];
	}
	l->n++;
}

static struct sc *logged(struct rec_log *l, int level, void (*tune)(kva_config *))
{
	kva_config c;
	sc_config(&c);
	c.log_record = on_record;
	c.log_record_ctx = l;
	c.log_level = level;
	if (tune)
		tune(&c);
	return sc_new(&c);
}

static const kva_log_record *find(struct rec_log *l, int event, uint64_t id)
{
	for (uint32_t i = 0; i < l->n && i < 256; i++)
		if (l->r[i].event == event && l->r[i].handle.id == id)
			return &l->r[i];
	return NULL;
}

static void short_wait(kva_config *c) { c->max_restore_wait_ns = 2 * SC_SEC; }

static void wait_lines_carry_the_request_and_numbers(void **st)
{
	(void)st;
	struct rec_log l = {0};
	struct sc *s = logged(&l, KVA_LOG_INFO, short_wait);
	sc_occupy(s, 100, 95);
	sc_dir_set(s, 7, sc_ckpt(64, 80, 0));
	kva_handle h = sc_submit(s, 1, 7, 256); /* needs 16 pages, 5 free */
	sc_step(s, 0);
	const kva_log_record *r = find(&l, KVA_LOGEV_WAIT_STARTED, 1);
	assert_non_null(r);
	assert_int_equal(r->level, KVA_LOG_INFO);
	assert_int_equal(r->handle.gen, h.gen);
	assert_int_equal(r->handle.slot, h.slot);
	assert_int_equal(r->value, 16); /* pages it needs */
	assert_non_null(strstr(r->message, "request 1"));
	sc_step(s, 3 * SC_SEC);
	r = find(&l, KVA_LOGEV_WAIT_EXPIRED, 1);
	assert_non_null(r);
	assert_int_equal(r->level, KVA_LOG_WARN);
	assert_true(r->value >= 2 * SC_SEC);
	assert_null(find(&l, KVA_LOGEV_FALLBACK, 1)); /* DEBUG: below log_level */
	sc_free(s);
}

static void debug_level_shows_every_fallback_with_its_reason(void **st)
{
	(void)st;
	struct rec_log l = {0};
	struct sc *s = logged(&l, KVA_LOG_DEBUG, NULL);
	sc_submit(s, 1, 0, 16); /* no key */
	sc_submit(s, 2, 99, 16); /* key 99: never answered, times out */
	sc_step(s, 0);
	const kva_log_record *r = find(&l, KVA_LOGEV_FALLBACK, 1);
	assert_non_null(r);
	assert_int_equal(r->level, KVA_LOG_DEBUG);
	assert_int_equal(r->reason, KVA_REASON_NO_KEY);
	sc_step(s, 2 * SC_SEC);
	r = find(&l, KVA_LOGEV_LOOKUP_TIMEOUT, 2);
	assert_non_null(r);
	assert_int_equal(r->value, 1 * SC_SEC);
	r = find(&l, KVA_LOGEV_FALLBACK, 2);
	assert_non_null(r);
	assert_int_equal(r->reason, KVA_REASON_LOOKUP_TIMEOUT);
	sc_free(s);
}

static void copy_failures_retries_and_duplicates_are_logged(void **st)
{
	(void)st;
	struct rec_log l = {0};
	struct sc *s = logged(&l, KVA_LOG_INFO, NULL);
	sc_dir_set(s, 7, sc_ckpt(64, 80, 0));
	sc_submit(s, 1, 7, 128);
	sc_step(s, 0);
	sc_copies_done(s, -5);
	sc_submit(s, 1, 0, 16); /* id 1 is live */
	sc_step(s, 0);
	const kva_log_record *r = find(&l, KVA_LOGEV_COPY_FAILED, 1);
	assert_non_null(r);
	assert_int_equal(r->level, KVA_LOG_WARN);
	assert_int_equal(r->value, 1); /* the attempt */
	r = find(&l, KVA_LOGEV_COPY_RETRY, 1);
	assert_non_null(r);
	assert_int_equal(r->value, 1);
	r = find(&l, KVA_LOGEV_DUPLICATE_ID, 1);
	assert_non_null(r);
	assert_int_equal(r->level, KVA_LOG_WARN);
	sc_free(s);
}

static int dead_importer(void *ctx, kva_engine *e, const kva_copy_job *job)
{
	(void)ctx;
	(void)e;
	(void)job;
	return -EIO;
}

static void dead_importers(kva_config *c) { c->importers[0] = (kva_importer_ref){dead_importer, 0}; }

static void a_refusing_importer_is_logged_with_its_errno(void **st)
{
	(void)st;
	struct rec_log l = {0};
	struct sc *s = logged(&l, KVA_LOG_INFO, dead_importers);
	sc_dir_set(s, 7, sc_ckpt(64, 80, 0));
	sc_submit(s, 1, 7, 128);
	sc_step(s, 0);
	const kva_log_record *r = find(&l, KVA_LOGEV_IMPORTER_REFUSED, 1);
	assert_non_null(r);
	assert_int_equal(r->level, KVA_LOG_WARN);
	assert_int_equal(r->value, EIO);
	assert_non_null(strstr(r->message, "importer dead"));
	sc_free(s);
}

static void repeated_lines_are_rate_limited_and_counted(void **st)
{
	(void)st;
	struct rec_log l = {0};
	struct sc *s = logged(&l, KVA_LOG_DEBUG, NULL);
	for (uint64_t i = 1; i <= 100; i++)
		sc_submit(s, i, 0, 16); /* 100 NO_KEY fallbacks in one second */
	sc_step(s, 0);
	uint32_t fallbacks = 0;
	for (uint32_t i = 0; i < l.n; i++)
		fallbacks += l.r[i].event == KVA_LOGEV_FALLBACK;
	assert_int_equal(fallbacks, 16);
	assert_int_equal(sc_stats(s).logs_suppressed, 84);
	sc_submit(s, 200, 0, 16);
	sc_step(s, SC_SEC); /* a new second: lines again */
	assert_non_null(find(&l, KVA_LOGEV_FALLBACK, 200));
	sc_free(s);
}

static void log_level_is_validated(void **st)
{
	(void)st;
	kva_config c;
	sc_config(&c);
	assert_int_equal(c.log_level, KVA_LOG_INFO);
	c.log_level = KVA_LOG_ERROR + 1;
	int err = 0;
	assert_null(kva_engine_create(&c, &err));
	assert_int_equal(err, -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wait_lines_carry_the_request_and_numbers),
		cmocka_unit_test(debug_level_shows_every_fallback_with_its_reason),
		cmocka_unit_test(copy_failures_retries_and_duplicates_are_logged),
		cmocka_unit_test(a_refusing_importer_is_logged_with_its_errno),
		cmocka_unit_test(repeated_lines_are_rate_limited_and_counted),
		cmocka_unit_test(log_level_is_validated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
