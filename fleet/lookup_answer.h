/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup_answer: a lookup (CMD_LOOKUP) answered from the index, and the
 * answered checkpoints watched. I/O thread only.
 */
#ifndef KVA_FLEET_LOOKUP_ANSWER_H
#define KVA_FLEET_LOOKUP_ANSWER_H

#include "fleet_state.h"

/* Answers cmd (kva_lookup_answer) and counts it done (R3). */
void kvf_lookup_answer(kva_fleet *f, const struct cmd *cmd, uint64_t now);

#endif
