/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte reader shared by the fuzz targets: every input decodes to a valid
 * operation sequence (a read past the end yields zeros), so libFuzzer spends
 * its time on behaviour rather than on parse failures. Also the harnesses'
 * failure macro: an invariant violation prints what failed and aborts, which
 * libFuzzer records as a crash (the library itself never aborts).
 */
#ifndef KVA_FUZZ_INPUT_H
#define KVA_FUZZ_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fz {
	const uint8_t *p;
	size_t n, i;
};

static inline void fz_init(struct fz *f, const uint8_t *p, size_t n)
{
	f->p = p;
	f->n = n;
	f->i = 0;
}

static inline bool fz_more(const struct fz *f)
{
	return f->i < f->n;
}

static inline uint8_t fz_u8(struct fz *f)
{
	return f->i < f->n ? f->p[f->i++] : 0;
}

static inline uint16_t fz_u16(struct fz *f)
{
	uint16_t lo = fz_u8(f);
	return (uint16_t)(lo | (uint16_t)fz_u8(f) << 8);
}

/* A value in [0, n); n > 0. */
static inline uint32_t fz_below(struct fz *f, uint32_t n)
{
	return n <= 256 ? fz_u8(f) % n : fz_u16(f) % n;
}

static inline void fz_violation(const char *target, const char *what, const char *file, int line)
{
	fprintf(stderr, "%s: invariant violated (%s:%d): %s\n", target, file, line, what);
	abort();
}

/* FUZZ_TRACE=1 in the environment: the targets print what they decode and
 * what the engine answers, for triage of a single input. */
static int fz_trace = -1;
#define FZ_TRACE(...)                                                                              \
	do {                                                                                       \
		if (fz_trace < 0)                                                                  \
			fz_trace = getenv("FUZZ_TRACE") != NULL;                                   \
		if (fz_trace > 0)                                                                  \
			fprintf(stderr, __VA_ARGS__);                                              \
	} while (0)

#ifdef KVADMIT_KVADMIT_H
/* The engine targets' initializer. liburcu starts its hash-table resize
 * worker with the first table and joins it with the last: one idle engine
 * kept for the whole process saves a thread start and join per input. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	kva_config c;
	kva_config_default(&c);
	c.total_pages = 1;
	int err;
	static kva_engine *keepalive;
	keepalive = kva_engine_create(&c, &err);
	return keepalive ? 0 : 1;
}
#endif

#define FZ_CHECK(c)                                                                                \
	do {                                                                                       \
		if (!(c))                                                                          \
			fz_violation(FZ_TARGET, #c, __FILE__, __LINE__);                           \
	} while (0)

#endif
