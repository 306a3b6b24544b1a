/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KVA_API marks the exported functions of the shared libraries (built -fvisibility=hidden, as
 * libuv's UV_EXTERN); empty in the static archives. docs/embedding.md, "Exported symbols".
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
