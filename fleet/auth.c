/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth: CURVE keys of the fleet and of its publishers. See auth.h.
 */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static bool key_valid(const char *key)
{
	uint8_t raw[32];
	return key && strlen(key) == KVF_KEY_Z85 && zmq_z85_decode(raw, key) != NULL;
}

int kvf_auth_init(kva_fleet *f, const kva_fleet_config *cfg)
{
	if (!cfg->curve_public_key && !cfg->curve_secret_key)
		return 0;
	if (!key_valid(cfg->curve_public_key) || !key_valid(cfg->curve_secret_key))
		return -EINVAL;
	if (!zmq_has("curve"))
		return -ENOTSUP;
	f->server_keys = calloc(KVA_FLEET_MAX_PUBLISHERS, sizeof(*f->server_keys));
	if (!f->server_keys)
		return -ENOMEM;
	memcpy(f->curve_public, cfg->curve_public_key, KVF_KEY_Z85 + 1);
	memcpy(f->curve_secret, cfg->curve_secret_key, KVF_KEY_Z85 + 1);
	return 0;
}

int kvf_auth_check(const kva_fleet *f, const char *server_key)
{
	if (!server_key)
		return 0;
	return f->server_keys && key_valid(server_key) ? 0 : -EINVAL;
}

int kvf_auth_publisher(kva_fleet *f, uint32_t id, const char *server_key)
{
	int rc = kvf_auth_check(f, server_key);
	if (rc || !f->server_keys)
		return rc;
	if (server_key)
		memcpy(f->server_keys[id], server_key, KVF_KEY_Z85 + 1);
	else
		f->server_keys[id][0] = 0;
	return 0;
}

int kvf_auth_socket(kva_fleet *f, uint32_t id, void *sock)
{
	if (!f->server_keys || !f->server_keys[id][0])
		return 0;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, f->server_keys[id], KVF_KEY_Z85) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, f->curve_public, KVF_KEY_Z85) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, f->curve_secret, KVF_KEY_Z85) < 0)
		return zmq_errno() ? -zmq_errno() : -EINVAL;
	return 0;
}

void kvf_auth_fini(kva_fleet *f)
{
	explicit_bzero(f->curve_secret, sizeof f->curve_secret);
	free(f->server_keys);
	f->server_keys = NULL;
}
