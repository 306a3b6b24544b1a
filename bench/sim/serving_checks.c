/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving loop's invariants (serving.c), checked on the engines' own
 * statistics: credits conserved and running requests' pages accounted after
 * every step, nothing leaked and every request terminal, reported once, at
 * the end. A failed check records its first message and clears its flag.
 */
#include <stdio.h>

#include "serving_parts.h"

/* Records the first failed check (message and time) and clears *flag. */
void sim_check_fail(struct sim *s, bool *flag, const char *msg)
{
	if (*flag && !s->res->check_msg[0])
		snprintf(s->res->check_msg, sizeof(s->res->check_msg), "%s at t=%.6f s", msg,
			 (double)s->now_ns / SIM_NS_PER_S);
	*flag = false;
}

void sim_check_running(struct sim_node *n)
{
	struct sim *s = n->s;
	kva_stats st;
	kva_stats_get(n->e, &st);
	if (st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages !=
	    st.total_pages)
		sim_check_fail(s, &s->res->credits_conserved,
			       "free+reserved+in_use+draining != total");
	uint64_t held = 0;
	for (struct sim_agent *a = n->run.head; a; a = sim_list_next(&n->run, a))
		held += a->held_pages;
	if (!s->draining && held != st.in_use_pages)
		sim_check_fail(s, &s->res->page_accounting,
			       "pages held by running requests != in_use");
}

void sim_check_end(struct sim *s)
{
	struct sim_result *res = s->res;
	uint64_t submitted = 0, terminal = 0;
	bool busy = false;
	for (uint32_t i = 0; i < s->n_nodes; i++) {
		kva_stats st;
		kva_stats_get(s->nodes[i].e, &st);
		if (st.free_pages + st.reserved_pages + st.in_use_pages + st.draining_pages !=
		    st.total_pages)
			sim_check_fail(s, &res->credits_conserved,
				       "credits not conserved at the end");
		if (st.free_pages != st.total_pages || st.draining_pages || st.reserved_pages ||
		    st.in_use_pages || st.free_copy_slots != s->sc->copy_slots ||
		    st.free_run_slots != s->sc->m.max_running)
			sim_check_fail(s, &res->no_leaked_pages,
				       "pages, copy slots or run slots not all free");
		busy |= st.waiting || st.importing || st.ready || st.running;
		if (st.finished + st.cancelled + st.rejected != st.submitted)
			busy = true;
		submitted += st.submitted;
		terminal += st.finished + st.cancelled + st.rejected;
	}
	uint64_t submits = 0, reports = 0;
	bool live = false;
	for (uint32_t i = 0; i < s->sc->w.agents; i++) {
		submits += s->agents[i].submits;
		reports += s->agents[i].ended_reports;
		live |= s->agents[i].live;
	}
	if (live || busy || terminal != submitted || submitted != submits)
		sim_check_fail(s, &res->all_terminal, "a request is not terminal");
	if (reports != submits)
		sim_check_fail(s, &res->reported_once, "ended reports != submissions");
}
