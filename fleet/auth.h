/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth: optional CURVE authentication of publishers (docs/fleet.md,
 * "Security"). A publisher given a curve_server_key is only heard from over
 * a CURVE handshake with that key: whoever lacks the matching secret key
 * (an impersonator at its address, anyone on the path) gets nothing in, and
 * the stream is encrypted. The fleet's own key pair (curve_public_key,
 * curve_secret_key) is what publishers may check in turn (ZAP, theirs).
 */
#ifndef KVA_FLEET_AUTH_H
#define KVA_FLEET_AUTH_H

#include "fleet_state.h"

#define KVF_KEY_Z85 40 /* a Z85-encoded CURVE key */

/* The fleet's key pair from cfg (both or neither). 0, -EINVAL (malformed or
 * half a pair), -ENOTSUP (a key pair, and libzmq without CURVE). */
int kvf_auth_init(kva_fleet *f, const kva_fleet_config *cfg);

/* Publisher id's server key (NULL: none). 0, -EINVAL (malformed, or the
 * fleet has no key pair). Any thread that owns slot id (before the command
 * that opens it). */
int kvf_auth_publisher(kva_fleet *f, uint32_t id, const char *server_key);

/* Whether server_key is usable for this fleet (kvf_auth_publisher's checks,
 * nothing stored). */
int kvf_auth_check(const kva_fleet *f, const char *server_key);

/* CURVE options on sock, before it connects, when publisher id has a key. */
int kvf_auth_socket(kva_fleet *f, uint32_t id, void *sock);

/* Wipes the secret key and frees (kva_fleet_destroy). */
void kvf_auth_fini(kva_fleet *f);

#endif
