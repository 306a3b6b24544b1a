/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host process around the engine (hardening issue, items 10, 11, 13):
 * the threads kvadmit starts block every signal, a child forked with engines
 * live can destroy what it inherited and run new engines while the parent
 * goes on, and a thread-exit destructor may call kvadmit after kvadmit's own
 * per-thread allocator cache is gone. Issue 28, items 3 and 4: a fork storm
 * while threads register and exit, and a walk from a destructor after the
 * host ended the thread's registration.
 */
#define _GNU_SOURCE 1
#include "scenario.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "kvadmit/importer.h"
#include "kva_test.h"
#include "thread_signals.h"

int kva__alloc_thread_tcache(void); /* reservations/alloc.h */

/* ---- item 11: signals ---------------------------------------------------- */

static int no_resolve(void *ctx, uint64_t id, uint64_t epoch, uint32_t rank, const void **src,
		      size_t *bytes)
{
	(void)ctx, (void)id, (void)epoch, (void)rank, (void)src, (void)bytes;
	return -ENOENT;
}

/* First in this process: liburcu's call_rcu thread is started by the first
 * engine, and must not inherit this (unblocked) thread's mask. */
static void threads_kvadmit_starts_block_every_signal(void **st)
{
	(void)st;
	static char pool[4 * 4096];
	kva_cpu_importer_config ic;
	kva_cpu_importer_config_default(&ic);
	ic.threads = 2;
	ic.page_bytes = 4096;
	ic.dest_base = pool;
	ic.dest_pages = 4;
	ic.resolve = no_resolve;
	int err = 1;
	kva_cpu_importer *imp = kva_cpu_importer_create(&ic, &err);
	assert_non_null(imp);
	struct sc *s = sc_default();
	/* a retired record: its slot goes through call_rcu */
	kva_handle h = sc_submit(s, 1, 0, 16);
	sc_step(s, 0);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0);
	sc_step(s, 0);

	int others = 0;
	assert_int_equal(threads_taking_signals(&others), 0);
	assert_true(others >= 3); /* two workers and the call_rcu thread */
	sc_free(s);
	kva_cpu_importer_destroy(imp);
}

/* ---- item 10: fork ----------------------------------------------------------- */

/* In a child: an engine of its own, used and destroyed. 0 or a failure code. */
static int child_engine_round(void)
{
	kva_config c;
	sc_config(&c);
	int err;
	kva_engine *e = kva_engine_create(&c, &err);
	if (!e)
		return 10;
	kva_admission adm[64];
	uint32_t pages[4096];
	kva_ended ended[64];
	kva_plan p = {.admitted = adm, .admitted_cap = 64, .pages = pages, .pages_cap = 4096,
		      .ended = ended, .ended_cap = 64};
	kva_handle h[40];
	for (int i = 0; i < 40; i++) {
		kva_request r = {.id = 100 + (uint64_t)i, .prompt_tokens = 16};
		if (kva_submit(e, &r, &h[i]) != 0)
			return 11;
	}
	uint32_t ended_n = 0;
	if (kva_step(e, 1, &p) < 0)
		return 12;
	for (int i = 0; i < 40; i++)
		if (kva_finish(e, h[i]) != 0 && kva_cancel(e, h[i]) != 0)
			return 13;
	for (uint64_t t = 2; t < 6; t++) {
		if (kva_step(e, t, &p) < 0)
			return 14;
		ended_n += p.n_ended;
	}
	kva_engine_destroy(e);
	return ended_n == 40 ? 0 : 15;
}

#if defined(__SANITIZE_THREAD__)
#define KVA_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVA_TEST_TSAN 1
#endif
#endif

static void atfork_once(void)
{
	static bool registered;
	if (!registered) {
		assert_int_equal(
		    pthread_atfork(kva_atfork_prepare, kva_atfork_parent, kva_atfork_child), 0);
		registered = true;
	}
}

/* Waits up to 30 s for the child; false (and the child killed) if it did
 * not end by then. */
static bool wait_child(pid_t pid, int *status)
{
	pid_t got = 0;
	for (int i = 0; i < 3000 && got == 0; i++) {
		got = waitpid(pid, status, WNOHANG);
		if (got == 0)
			nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	if (got == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, status, 0);
	}
	return got != 0;
}

/* The child's exit status; a child that hangs (20 s alarm, 30 s here) fails. */
static int child_status(pid_t pid)
{
	int status = 0;
	if (!wait_child(pid, &status))
		fail_msg("the child hung");
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void fork_with_engines_live(void **st)
{
	(void)st;
#ifdef KVA_TEST_TSAN
	/* ThreadSanitizer cannot run a child that starts threads after a
	 * multi-threaded fork (the child's new call_rcu thread): the normal and
	 * ASan builds run this test. */
	skip();
#endif
	atfork_once();
	struct sc *s = sc_default();
	struct sc *other = sc_default();
	for (int round = 0; round < 3; round++) {
		/* live work in every state the step can leave: running, waiting,
		 * retired slots still in call_rcu */
		kva_handle run = sc_submit(s, 1000 + (uint64_t)round * 10, 0, 64);
		kva_handle gone = sc_submit(s, 1001 + (uint64_t)round * 10, 0, 16);
		sc_step(s, 0);
		assert_int_equal(kva_finish(s->e, gone), 0);
		kva_handle wait = sc_submit(s, 1002 + (uint64_t)round * 10, 7, 16);
		sc_step(s, 0);
		(void)sc_submit(other, 2000 + (uint64_t)round, 0, 16);

		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			alarm(20); /* a hang fails the parent's wait below */
			kva_engine_destroy(s->e); /* inherited, work in flight */
			int rc = child_engine_round();
			if (!rc)
				rc = child_engine_round(); /* the new call_rcu thread ran */
			kva_engine_destroy(other->e);
			free(s); /* the harness's own memory, so leak checkers see none */
			free(other);
			_exit(rc);
		}
		assert_int_equal(child_status(pid), 0);

		/* the parent goes on with the same engines */
		assert_int_equal(kva_finish(s->e, run), 0);
		assert_int_equal(kva_cancel(s->e, wait), 0);
		sc_step(s, SC_SEC);
		sc_step(other, 0);
		sc_assert_conserved(s);
	}
	kva_stats x = sc_stats(s);
	assert_int_equal(x.waiting + x.running + x.importing + x.ready, 0);
	sc_free(other);
	sc_free(s);
}

struct idle_reader {
	kva_engine *e;
	kva_handle h;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool called, release;
};

/* Calls kvadmit once (registering with urcu-memb), then waits to be released. */
static void *idle_reader_main(void *arg)
{
	struct idle_reader *r = arg;
	kva_request_info info;
	(void)kva_query(r->e, r->h, &info);
	pthread_mutex_lock(&r->mu);
	r->called = true;
	pthread_cond_broadcast(&r->cv);
	while (!r->release)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* Calls kvadmit once (registering), then unregisters itself before it
 * ends, which kvadmit.h allows. */
static void *self_unregistering_main(void *arg)
{
	struct idle_reader *r = arg;
	kva_request_info info;
	(void)kva_query(r->e, r->h, &info);
	urcu_memb_unregister_thread();
	return NULL;
}

/* A fork while another thread kvadmit registered is alive: the child keeps
 * that thread's registry entry, which its own new threads' TLS overwrites,
 * so no grace period may run there. It may destroy (no grace period) but
 * not create or step (-ENOTSUP), instead of hanging or crashing in
 * liburcu. Once that thread has exited, a child may use kvadmit again, also
 * after a thread that unregistered itself before its end. */
static void fork_with_another_registered_thread_leaves_destroy_only(void **st)
{
	(void)st;
#ifdef KVA_TEST_TSAN
	skip(); /* as fork_with_engines_live */
#endif
	atfork_once();
	struct sc *s = sc_default();
	kva_handle h = sc_submit(s, 1, 0, 16);
	sc_step(s, 0);
	struct idle_reader r = {.e = s->e, .h = h};
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, idle_reader_main, &r), 0);
	pthread_mutex_lock(&r.mu);
	while (!r.called)
		pthread_cond_wait(&r.cv, &r.mu);
	pthread_mutex_unlock(&r.mu);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		kva_config c;
		sc_config(&c);
		int err = 0, rc = 0;
		kva_engine *e = kva_engine_create(&c, &err);
		if (e || err != -ENOTSUP)
			rc = 20;
		else if (kva_step(s->e, 1, &s->plan) != -ENOTSUP)
			rc = 21;
		kva_engine_destroy(s->e); /* allowed: waits for no grace period */
		free(s);
		_exit(rc);
	}
	assert_int_equal(child_status(pid), 0);

	pthread_mutex_lock(&r.mu);
	r.release = true;
	pthread_cond_broadcast(&r.cv);
	pthread_mutex_unlock(&r.mu);
	assert_int_equal(pthread_join(t, NULL), 0); /* its exit hook unregistered it */
	assert_int_equal(pthread_create(&t, NULL, self_unregistering_main, &r), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		int rc = child_engine_round();
		kva_engine_destroy(s->e);
		free(s);
		_exit(rc);
	}
	assert_int_equal(child_status(pid), 0);
	assert_int_equal(kva_finish(s->e, h), 0);
	sc_step(s, 0);
	sc_free(s);
}

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void sleep_us(long us)
{
	nanosleep(&(struct timespec){0, us * 1000}, NULL);
}

/* ---- issue 28, item 3: a fork storm while threads register and exit ------ */

static struct sc *storm_sc;
static atomic_bool storm_stop;

/* A short read-side section, so a thread forked away in its window is
 * likely inside one (the child's grace periods then wait for it for ever). */
static int storm_walk_fn(void *ctx, const kva_waiting_info *w)
{
	(void)ctx, (void)w;
	uint64_t until = mono_ns() + 20 * 1000;
	while (mono_ns() < until)
		;
	return 0;
}

/* ASan's allocator and thread registry are not fork-safe in this
 * toolchain (gcc 12's libasan takes no lock of theirs around fork): a child
 * forked while another thread was inside one hangs in its first malloc. So
 * the churn threads start and end (where glibc and ASan allocate) only
 * under storm_gate, which the test's own prepare handler takes before
 * kvadmit's runs; what kvadmit does in between (registering, read-side
 * sections) races with the fork freely. */
static pthread_mutex_t storm_gate = PTHREAD_MUTEX_INITIALIZER;

static void storm_gate_lock(void)
{
	pthread_mutex_lock(&storm_gate);
}

static void storm_gate_unlock(void)
{
	pthread_mutex_unlock(&storm_gate);
}

struct storm_thread {
	kva_handle h;
	unsigned n;	  /* threads this churner started */
	atomic_int stage; /* 1 started, 2 done with kvadmit, 3 may end */
};

/* Registers with kvadmit on its first call (up to 3 ms after it started,
 * so registrations land anywhere in a prepare handler's run), reads, ends:
 * its exit hook unregisters it. */
static void *storm_reader(void *arg)
{
	struct storm_thread *t = arg;
	atomic_store(&t->stage, 1);
	sleep_us((long)(t->n * 389u % 3000u));
	kva_request_info info;
	(void)kva_query(storm_sc->e, t->h, &info);
	(void)kva_waiting_foreach(storm_sc->e, storm_walk_fn, NULL, 4);
	atomic_store(&t->stage, 2);
	while (atomic_load(&t->stage) != 3)
		sleep_us(50);
	return NULL;
}

static void *storm_churn(void *arg)
{
	struct storm_thread t = {.h = *(kva_handle *)arg};
	while (!atomic_load_explicit(&storm_stop, memory_order_relaxed)) {
		pthread_t th;
		t.n++;
		atomic_store(&t.stage, 0);
		storm_gate_lock();
		int rc = pthread_create(&th, NULL, storm_reader, &t);
		while (!rc && atomic_load(&t.stage) == 0)
			sleep_us(20);
		storm_gate_unlock();
		if (rc)
			continue;
		while (atomic_load(&t.stage) != 2)
			sleep_us(20);
		storm_gate_lock();
		atomic_store(&t.stage, 3);
		pthread_join(th, NULL);
		storm_gate_unlock();
	}
	return NULL;
}

void kva__rcu_fail_exit_hook(int n); /* lockfree/rcu_thread.h */

/* A transient thread (its exit hook could not be set): registered only
 * inside each read-side section, so it registers and unregisters all the
 * time without starting or ending. */
static atomic_int storm_transient_calls;

static void *storm_transient(void *arg)
{
	while (!atomic_load_explicit(&storm_stop, memory_order_relaxed)) {
		(void)kva_waiting_foreach(storm_sc->e, storm_walk_fn, NULL, 4);
		atomic_fetch_add(&storm_transient_calls, 1);
		sleep_us(300);
	}
	(void)arg;
	return NULL;
}

enum { STORM_ACCEPTED = 0, STORM_REFUSED = 40 };

/* In a child: kva_engine_create refuses (-ENOTSUP), or an engine of its
 * own runs and the child's grace periods end (a registry entry of a thread
 * that was registered at the fork would hold them up for ever, or be
 * overwritten by the child's new call_rcu thread). */
static int storm_child(void)
{
	/* a crash or a hang is a failure the parent sees (not cmocka's
	 * handlers, which would run the next tests in this child) */
	signal(SIGSEGV, SIG_DFL);
	signal(SIGBUS, SIG_DFL);
	signal(SIGILL, SIG_DFL);
	signal(SIGFPE, SIG_DFL);
	signal(SIGABRT, SIG_DFL);
	alarm(10);
	kva_config c;
	sc_config(&c);
	int err = 0, rc;
	kva_engine *e = kva_engine_create(&c, &err);
	if (e) {
		kva_engine_destroy(e);
		rc = child_engine_round();
		urcu_memb_synchronize_rcu();
		urcu_memb_barrier(); /* the call_rcu thread's grace periods */
	} else {
		rc = err == -ENOTSUP ? STORM_REFUSED : 41;
	}
	kva_engine_destroy(storm_sc->e); /* allowed in every child */
	free(storm_sc);
	return rc;
}

/* Forks a storm child: its exit status (STORM_ACCEPTED, STORM_REFUSED or
 * another code), 1000 + the signal that ended it, or 2000 if it had to be
 * killed (30 s; its alarm ends it after 10). */
static int storm_fork(void)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(storm_child());
	if (pid < 0)
		return 3000;
	int status = 0;
	if (!wait_child(pid, &status))
		return 2000;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

/* Every child either refuses or runs an engine to its end; none hangs or
 * crashes. Before the prepare handler held the registration lock, a thread
 * registering (or unregistering) between its count and the fork let the
 * child run grace periods, which then never ended (18 to 30 of 60 children
 * here, under ASan). */
static void fork_storm_while_threads_register_and_exit(void **st)
{
	(void)st;
#ifdef KVA_TEST_TSAN
	skip(); /* as fork_with_engines_live */
#endif
	atfork_once();
	static bool gate_registered;
	if (!gate_registered) {
		/* after kvadmit's: its prepare runs first, its parent and child
		 * handlers last */
		assert_int_equal(
		    pthread_atfork(storm_gate_lock, storm_gate_unlock, storm_gate_unlock), 0);
		gate_registered = true;
	}
	enum { CHURNERS = 2 };
	const int forks = (int)kva_test_scaled(60);
	storm_sc = sc_default();
	/* one running, the rest waiting: the readers' walks have work */
	kva_handle first = sc_submit(storm_sc, 1, 0, 16);
	sc_step(storm_sc, 0);
	for (uint64_t i = 0; i < 8; i++)
		(void)sc_submit(storm_sc, 10 + i, 0, 16 * 100);
	sc_step(storm_sc, 0);
	atomic_store(&storm_stop, false);
	atomic_store(&storm_transient_calls, 0);
	pthread_t churn[CHURNERS], transient;
	kva__rcu_fail_exit_hook(1); /* the transient thread's registration */
	assert_int_equal(pthread_create(&transient, NULL, storm_transient, NULL), 0);
	while (atomic_load(&storm_transient_calls) == 0)
		sleep_us(100);
	for (int i = 0; i < CHURNERS; i++)
		assert_int_equal(pthread_create(&churn[i], NULL, storm_churn, &first), 0);
	int accepted = 0, refused = 0, bad = 0, last_bad = 0;
	for (int i = 0; i < forks; i++) {
		sleep_us(500 + 137 * (i % 7)); /* land at different points of the churn */
		int rc = storm_fork();
		if (rc == STORM_ACCEPTED)
			accepted++;
		else if (rc == STORM_REFUSED)
			refused++;
		else
			bad++, last_bad = rc;
	}
	atomic_store(&storm_stop, true);
	for (int i = 0; i < CHURNERS; i++)
		pthread_join(churn[i], NULL);
	pthread_join(transient, NULL);
	fprintf(stderr, "fork storm: %d forks, %d accepted, %d refused, %d failed (last %d)\n",
		forks, accepted, refused, bad, last_bad);
	assert_int_equal(bad, 0);
	assert_int_equal(accepted + refused, forks);
	/* every other thread kvadmit registered has ended: accepted */
	assert_int_equal(storm_fork(), STORM_ACCEPTED);
	/* the parent goes on */
	assert_int_equal(kva_finish(storm_sc->e, first), 0);
	sc_step(storm_sc, 0);
	sc_free(storm_sc);
}

/* ---- issue 28, item 4: the host ended the registration, a destructor walks - */

enum { WALK_WAITING = 2000, WALK_BASE = 100000 };

/* Created first in main (before kvadmit's own exit-hook key): its
 * destructor runs before kvadmit's exit hook, as a host's may. */
static pthread_key_t walk_key;
static struct sc *walk_sc;
static atomic_int walk_phase; /* 1: the walk's first call; 2: the walk returned */
static atomic_int walk_gp;    /* 1: start a grace period; 2: it ended */
static int walk_rc, walk_listed, walk_bad, walk_gp_inside;
static kva_handle walk_probe_h;

static int walk_fn(void *ctx, const kva_waiting_info *w)
{
	(void)ctx;
	if (w->position != (uint32_t)walk_listed || w->handle.id < WALK_BASE ||
	    w->handle.id >= WALK_BASE + 2 * WALK_WAITING || w->prompt_tokens != 16 * 100)
		walk_bad++;
	walk_listed++;
	if (walk_listed == 1) {
		atomic_store(&walk_phase, 1); /* the scheduler retires records now */
		atomic_store(&walk_gp, 1);
		/* This section is open: no grace period that began now may end
		 * while it lasts. Give one 200 ms to (wrongly) end. */
		uint64_t until = mono_ns() + 200 * SC_MS;
		while (atomic_load(&walk_gp) != 2 && mono_ns() < until)
			sleep_us(1000);
		walk_gp_inside = atomic_load(&walk_gp) == 2;
		if (walk_gp_inside)
			return 1; /* its records may be reused already: stop here */
	}
	return 0;
}

static void walk_destructor(void *v)
{
	(void)v;
	walk_rc = kva_waiting_foreach(walk_sc->e, walk_fn, NULL, 0);
	atomic_store(&walk_phase, 2);
}

/* A host thread: registered (by itself, or by kvadmit on its first call),
 * uses kvadmit, and ends the registration at its end, as kvadmit.h allows;
 * its key destructor then walks the waiting queue. */
static void *walk_host(void *arg)
{
	if (arg)
		urcu_memb_register_thread();
	kva_request_info info;
	(void)kva_query(walk_sc->e, walk_probe_h, &info);
	(void)pthread_setspecific(walk_key, (void *)1);
	urcu_memb_unregister_thread();
	return NULL;
}

static void *walk_synchronizer(void *arg)
{
	(void)arg;
	while (atomic_load(&walk_gp) != 1)
		sleep_us(100);
	urcu_memb_synchronize_rcu();
	atomic_store(&walk_gp, 2);
	return NULL;
}

static void destructor_walks_after_the_host_ended_the_registration(void **st)
{
	(void)st;
	for (int own = 0; own < 2; own++) {
		kva_config c;
		sc_config(&c);
		c.max_running = 1;
		walk_sc = sc_new(&c);
		walk_probe_h = sc_submit(walk_sc, 1, 0, 16); /* runs; the rest wait */
		sc_step(walk_sc, 0);
		static kva_handle h[WALK_WAITING];
		for (uint32_t i = 0; i < WALK_WAITING; i++)
			h[i] = sc_submit(walk_sc, WALK_BASE + i, 0, 16 * 100);
		sc_step(walk_sc, 0);
		atomic_store(&walk_phase, 0);
		atomic_store(&walk_gp, 0);
		walk_rc = walk_listed = walk_bad = walk_gp_inside = 0;

		pthread_t host, sync;
		assert_int_equal(pthread_create(&sync, NULL, walk_synchronizer, NULL), 0);
		assert_int_equal(pthread_create(&host, NULL, walk_host, own ? (void *)1 : NULL), 0);
		while (atomic_load(&walk_phase) == 0)
			sleep_us(100);
		/* The scheduler, while the walk is in its section: every waiting
		 * record retired (call_rcu), new ones submitted into the slots
		 * that grace periods hand back. */
		for (uint32_t i = 0; i < WALK_WAITING; i++)
			assert_int_equal(kva_cancel(walk_sc->e, h[i]), 0);
		uint32_t next = WALK_WAITING;
		while (atomic_load(&walk_phase) != 2) {
			sc_step(walk_sc, 0);
			for (int k = 0; k < 64 && next < 2 * WALK_WAITING; k++, next++)
				(void)sc_submit(walk_sc, WALK_BASE + next, 0, 16 * 100);
			sleep_us(200);
		}
		pthread_join(host, NULL);
		pthread_join(sync, NULL); /* its grace period ended after the walk */
		assert_false(walk_gp_inside);
		assert_int_equal(walk_bad, 0);
		assert_true(walk_listed >= 1);
		assert_int_equal(walk_rc, walk_listed);
		assert_int_equal(kva_finish(walk_sc->e, walk_probe_h), 0);
		sc_step(walk_sc, 0);
		sc_free(walk_sc);
	}
}

/* ---- item 13: a thread-exit destructor calls in ------------------------------ */

static struct sc *late_sc;
static pthread_key_t late_key;
static kva_handle late_h[2], late_new;
static int late_rounds, late_cancel_rc = 1, late_submit_rc = 1, late_evict_rc = 1;
static int late_tcache_before = -2, late_tcache_after = -2;

static void late_destructor(void *v)
{
	(void)v;
	if (++late_rounds == 1) {
		/* once more, in the next round: kvadmit's own thread-exit hooks
		 * (its allocator cache among them) have run by then */
		(void)pthread_setspecific(late_key, (void *)1);
		return;
	}
	late_tcache_before = kva__alloc_thread_tcache();
	late_cancel_rc = kva_cancel(late_sc->e, late_h[0]);
	late_evict_rc = kva_checkpoint_evicted(late_sc->e, 4242, 1); /* allocates an event */
	kva_request r = {.id = 77, .prompt_tokens = 16};
	late_submit_rc = kva_submit(late_sc->e, &r, &late_new);
	late_tcache_after = kva__alloc_thread_tcache();
}

static void *late_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2; i++) {
		kva_request r = {.id = 70 + (uint64_t)i, .prompt_tokens = 16};
		if (kva_submit(late_sc->e, &r, &late_h[i]) != 0)
			return NULL;
	}
	(void)kva_cancel(late_sc->e, late_h[1]);
	/* allocates: this thread's allocator cache is in use */
	(void)kva_checkpoint_evicted(late_sc->e, 4241, 1);
	(void)pthread_setspecific(late_key, (void *)1);
	return NULL;
}

/* Other threads come and go meanwhile, so a destroyed cache index would be
 * handed to one of them. */
static void *churn_thread(void *arg)
{
	(void)arg;
	kva_request r = {.id = 0, .prompt_tokens = 16};
	kva_handle h;
	for (int i = 0; i < 4; i++) {
		r.id = 500 + (uint64_t)i + 10 * (uint64_t)(uintptr_t)arg;
		if (kva_submit(late_sc->e, &r, &h) == 0)
			(void)kva_cancel(late_sc->e, h);
	}
	return NULL;
}

static void thread_exit_destructor_calls_in_after_the_allocator_cache_is_gone(void **st)
{
	(void)st;
	late_sc = sc_default();
	assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
	for (int round = 0; round < 4; round++) {
		late_rounds = 0;
		late_cancel_rc = late_submit_rc = late_evict_rc = 1;
		pthread_t th, churn[3];
		assert_int_equal(pthread_create(&th, NULL, late_thread, NULL), 0);
		pthread_join(th, NULL);
		for (int i = 0; i < 3; i++)
			assert_int_equal(pthread_create(&churn[i], NULL, churn_thread,
							(void *)(uintptr_t)(i + 1 + 3 * round)),
					 0);
		for (int i = 0; i < 3; i++)
			pthread_join(churn[i], NULL);
		assert_int_equal(late_rounds, 2);
		assert_int_equal(late_cancel_rc, 0);
		assert_int_equal(late_evict_rc, 0);
		/* no allocator cache after kvadmit's was destroyed: never the
		 * destroyed index, which jemalloc hands to the next thread */
		assert_int_equal(late_tcache_before, -1);
		assert_int_equal(late_tcache_after, -1);
		assert_int_equal(late_submit_rc, 0);
		sc_step(late_sc, 0);
		sc_step(late_sc, 0);
		/* the late submit is a request like any other */
		assert_int_equal(kva_finish(late_sc->e, late_new), 0);
		sc_step(late_sc, 0);
	}
	kva_stats x = sc_stats(late_sc);
	assert_int_equal(x.cancelled, 4 * (2 + 12));
	assert_int_equal(x.finished, 4);
	pthread_key_delete(late_key);
	sc_free(late_sc);
}

int main(void)
{
	/* before kvadmit creates its own key (the first engine) */
	if (pthread_key_create(&walk_key, walk_destructor) != 0)
		return 1;
	const struct CMUnitTest tests[] = {
	    /* first: the call_rcu thread is started by this test's engine */
	    cmocka_unit_test(threads_kvadmit_starts_block_every_signal),
	    cmocka_unit_test(fork_with_engines_live),
	    cmocka_unit_test(fork_with_another_registered_thread_leaves_destroy_only),
	    cmocka_unit_test(thread_exit_destructor_calls_in_after_the_allocator_cache_is_gone),
	    cmocka_unit_test(fork_storm_while_threads_register_and_exit),
	    cmocka_unit_test(destructor_walks_after_the_host_ended_the_registration),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
