/* SPDX-License-Identifier: Apache-2.0 */
/* Version, capability probing (rule capabilities) and error strings. */
#include <errno.h>
#include <string.h>
#include "kvadmit/kvadmit.h"

/* The CUDA importer lives in libkvadmit-cuda, which the core never links:
 * the weak reference is non-NULL exactly when that library is linked into
 * the process or was loaded together with the core, and it says whether it
 * was built with CUDA (its stub build says false). */
extern bool kva_cuda_importer_supported(void) __attribute__((weak));

/* KVA_VERSION_* come from kvadmit/version.h, generated from project(VERSION). */
uint32_t kva_version(void) { return KVA_VERSION_NUMBER; }

const char *kva_version_string(void) { return KVA_VERSION_STRING; }

bool kva_has_feature(int feature)
{
	switch (feature) {
	case KVA_FEATURE_RESTORE_RESERVATION:
	case KVA_FEATURE_BOUNDED_WAIT:
	case KVA_FEATURE_COLLECTIVE_COPY:
	case KVA_FEATURE_LOCAL_REVALIDATION:
	case KVA_FEATURE_RESET_RELEASES_READY:
	case KVA_FEATURE_HOST_LOCAL:
	case KVA_FEATURE_EXACT_BUDGET:
	case KVA_FEATURE_CREDITS_ONLY:
	case KVA_FEATURE_COST_POLICY:
		return true;
	case KVA_FEATURE_CUDA_IMPORTER:
		return kva_cuda_importer_supported && kva_cuda_importer_supported();
	default:
		return false;
	}
}

const char *kva_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case -EINVAL: return "invalid argument (NULL, malformed or out of contract)";
	case -ENOENT: return "unknown or ended request, lookup or copy";
	case -ESTALE: return "token no longer current (late or superseded)";
	case -EALREADY: return "already done";
	case -EEXIST: return "a live request with this id exists";
	case -EBUSY: return "request is not in a state that allows this now";
	case -ENOSPC: return "no free page credits";
	case -ERANGE: return "value out of range";
	case -ENOMEM: return "out of memory; nothing changed";
	case -ENODEV: return "no device available";
	case -ENOTSUP: return "not supported by this build";
	case -EAGAIN: return "resource temporarily unavailable";
	default: return "unknown error";
	}
}

const char *kva_reason_name(int reason)
{
	static const char *const names[KVA_REASON_COUNT] = {
		"none", "no_key", "miss", "incompatible", "lookup_timeout", "retries_exhausted",
		"wait_expired", "too_large", "legacy", "cost",
	};
	if (reason < 0 || reason >= KVA_REASON_COUNT)
		return "unknown";
	return names[reason];
}
