/* SPDX-License-Identifier: Apache-2.0 */
// A C++ host built against the installed package: the headers compile as
// C++, and the library links and runs from C++ (C linkage, no mangling).
#include <kvadmit/importer.h>
#include <kvadmit/kvadmit.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main()
{
	if (kva_version() != KVA_VERSION_NUMBER || std::string(kva_version_string()) != KVA_VERSION_STRING)
		return 1;
	kva_config cfg;
	kva_config_default(&cfg);
	cfg.total_pages = 128;
	cfg.page_tokens = 16;
	cfg.copy_slots = 2;
	cfg.max_running = 16;
	int err = 0;
	kva_engine *e = kva_engine_create(&cfg, &err);
	if (!e) {
		std::fprintf(stderr, "engine: %s\n", kva_strerror(err));
		return 1;
	}
	std::vector<kva_handle> handles(8);
	for (uint64_t i = 0; i < handles.size(); i++) {
		kva_request r{};
		r.id = i + 1;
		r.prompt_tokens = 32;
		if (kva_submit(e, &r, &handles[i]) != 0)
			return 1;
	}
	std::vector<kva_admission> adm(16);
	std::vector<uint32_t> pages(128);
	kva_plan plan{};
	plan.admitted = adm.data();
	plan.admitted_cap = static_cast<uint32_t>(adm.size());
	plan.pages = pages.data();
	plan.pages_cap = static_cast<uint32_t>(pages.size());
	int admitted = kva_step(e, 1000, &plan);
	for (auto &h : handles)
		kva_finish(e, h);
	kva_stats st;
	kva_stats_get(e, &st);
	kva_engine_destroy(e);
	std::printf("C++: kvadmit %s, %d admitted, %llu submitted\n", kva_version_string(), admitted,
	            static_cast<unsigned long long>(st.submitted));
	return admitted == 8 ? 0 : 1;
}
