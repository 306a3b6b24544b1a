/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io_thread: the fleet's one thread. It polls the command eventfd and each
 * publisher's sockets (SUB, replay DEALER, connection monitor), runs the
 * commands (lookups, chains, publishers added or removed) and ticks the
 * replay timeouts, drops and watch expiry. Publisher slots are opened and
 * closed here (and by kva_fleet_create/destroy while no thread runs).
 */
#ifndef KVA_FLEET_IO_THREAD_H
#define KVA_FLEET_IO_THREAD_H

#include "fleet_state.h"

#include <errno.h>
#include <zmq.h>

/* zmq's error as -errno (-EINVAL when it has none). */
static inline int zmq_err(void) { return zmq_errno() ? -zmq_errno() : -EINVAL; }

/* pthread entry; arg: the fleet. Runs until f->stop. */
void *kvf_io_thread(void *arg);

/* Fills slot pub (id) from the publisher's description (the strings are
 * owned by the slot after, also on failure) and opens its sockets.
 * Returns 0, -ENOMEM or zmq's error; kvf_pub_close cleans up either way. */
int kvf_pub_init(kva_fleet *f, struct publisher *pub, uint32_t id, char *endpoint,
                 char *replay_endpoint, char *topic, uint8_t self);

/* Closes the sockets, frees what the slot holds and zeroes it for reuse. */
void kvf_pub_close(struct publisher *pub);

void kvf_add_cmd_free(struct add_cmd *add);

#endif
