/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated clock's events due now, delivered for the serving loop
 * (serving.c): submits, directory answers, copy completions, store writes.
 */
#include "serving_parts.h"

void sim_deliver_due(struct sim *s)
{
	struct sim_event ev;
	while (!s->fatal && sim_clock_pop_due(&s->clock, s->now_ns, &ev)) {
		switch (ev.kind) {
		case SIM_EV_SUBMIT:
			sim_on_submit(s, &s->agents[ev.agent]);
			break;
		case SIM_EV_ANSWER: {
			uint32_t idx = (uint32_t)(ev.u.lookup.key & 0xffffffffu) - 1;
			sim_dir_answer(s, &ev);
			if (idx < s->sc->w.agents)
				sim_wake(s, sim_node_of(s, &s->agents[idx]));
			break;
		}
		case SIM_EV_COPY: {
			struct sim_node *n = &s->nodes[ev.node];
			int rc =
			    kva_copy_done(n->e, ev.u.copy.token, ev.u.copy.rank, ev.u.copy.status);
			if (rc != 0)
				sim_fatal(s, "kva_copy_done", rc);
			sim_wake(s, n);
			break;
		}
		case SIM_EV_WRITE:
			sim_store_written(s, &ev);
			break;
		}
	}
}
