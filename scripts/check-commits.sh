#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the form of commit messages (CONTRIBUTING.md, "Commits"):
#   - subject `area: imperative summary`, at most 72 characters, where area
#     is one or more lowercase names (a folder, file or module: `slab_cache`,
#     `docs/design`, `tests, bench`) and the summary starts lowercase and
#     does not end with a period;
#   - a blank second line whenever there is a body;
#   - a body (the why, the numbers) once the subject alone is not the whole
#     story: required for any commit that changes more than 20 lines.
#
# Usage: scripts/check-commits.sh [REVISION-RANGE]
# Without a range it checks every commit after the one that added this
# script, up to HEAD: history before it is not rewritten, only held to the
# rule from here on. Merges are skipped. Exit status: 0 when every commit
# passes, 1 when one fails (each failure is printed), 2 on usage errors.
set -euo pipefail
cd "$(dirname "$0")/.."

max_subject=72
body_after_lines=20

if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "check-commits: not a git checkout; nothing to check" >&2
	exit 2
fi

if [ $# -ge 1 ]; then
	range=$1
else
	# The commit that added this file: the rule holds from the next one on.
	added=$(git log --diff-filter=A --format=%H -- scripts/check-commits.sh | tail -n 1)
	if [ -z "$added" ]; then
		# Not committed yet (a working tree that is adding it): check nothing
		# older than HEAD's own commit.
		range=HEAD^..HEAD
	else
		range=$added..HEAD
	fi
fi

area_re='^[a-z0-9_.+/-]+(, ?[a-z0-9_.+/-]+)*: [^ A-Z].*[^.]$'
failed=0 checked=0
for c in $(git rev-list --no-merges "$range"); do
	checked=$((checked + 1))
	subject=$(git log -1 --format=%s "$c")
	second=$(git log -1 --format=%B "$c" | sed -n 2p)
	body=$(git log -1 --format=%b "$c" | grep -c . || true)
	changed=$(git show --numstat --format= "$c" | awk '$1 != "-" {n += $1 + $2} END {print n + 0}')
	why=()
	[ ${#subject} -le $max_subject ] || why+=("subject is ${#subject} characters (at most $max_subject)")
	[[ $subject =~ $area_re ]] || why+=("subject is not 'area: imperative summary' (lowercase area and start, no final period)")
	[ -z "$second" ] || why+=("second line is not blank")
	if [ "$body" -eq 0 ] && [ "$changed" -gt $body_after_lines ]; then
		why+=("no body, for $changed changed lines (say why, and the numbers)")
	fi
	if [ ${#why[@]} -gt 0 ]; then
		failed=$((failed + 1))
		echo "check-commits: $(git log -1 --format=%h "$c") $subject"
		for w in "${why[@]}"; do echo "    $w"; done
	fi
done
echo "check-commits: $checked commit(s) in $range, $failed with a malformed message"
[ $failed -eq 0 ]
