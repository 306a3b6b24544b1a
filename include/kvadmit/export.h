/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KVA_API marks the public functions: the libraries are built with hidden
 * visibility (-fvisibility=hidden), so only declarations carrying KVA_API are
 * exported from libkvadmit.so and libkvadmit-cuda.so (as libuv's UV_EXTERN).
 * tests/package/check_symbols.py compares the exports with the headers.
 * The static archives are compiled with KVA_API defined empty, so their
 * public functions are hidden too: a shared object that links an archive
 * does not re-export kvadmit's API (cmake/libraries.cmake).
 * Nothing to do for a host: the attribute is harmless on the using side.
 */
#ifndef KVADMIT_EXPORT_H
#define KVADMIT_EXPORT_H

#ifndef KVA_API
#if defined(__GNUC__) || defined(__clang__)
#define KVA_API __attribute__((visibility("default")))
#else
#define KVA_API
#endif
#endif

#endif
