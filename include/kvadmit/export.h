/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KVA_API marks the public functions: the libraries are built with hidden
 * visibility (-fvisibility=hidden), so only declarations carrying KVA_API are
 * exported from libkvadmit.so and libkvadmit-cuda.so (as libuv's UV_EXTERN).
 * tests/package/check_symbols.py compares the exports with the headers.
 * Nothing to do for a host: the attribute is harmless on the using side.
 */
#ifndef KVADMIT_EXPORT_H
#define KVADMIT_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define KVA_API __attribute__((visibility("default")))
#else
#define KVA_API
#endif

#endif
