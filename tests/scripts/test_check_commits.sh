#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/check-commits.sh against a scratch repository: each malformed
# message fails it with its reason, a well-formed history passes, and
# commits before the one that added the script are not held to the rule.
set -euo pipefail
script=$(cd "$(dirname "$0")/../../scripts" && pwd)/check-commits.sh
repo=$(mktemp -d)
trap 'rm -rf "$repo"' EXIT
cd "$repo"
git init -q
git config user.email ci@example.invalid
git config user.name ci
n=0
commit() { # commit LINES MESSAGE: a file change of LINES lines, then the message
	n=$((n + 1))
	seq "$1" | sed "s/^/$n /" >"f$n"
	git add "f$n"
	git commit -q -F - <<<"$2"
}
expect() { # expect RC PATTERN: run the check, compare status and output
	set +e
	out=$(scripts/check-commits.sh 2>&1)
	rc=$?
	set -e
	if [ "$rc" -ne "$1" ] || ! grep -q -- "$2" <<<"$out"; then
		echo "FAIL: wanted rc $1 and '$2', got rc $rc:"
		echo "$out"
		exit 1
	fi
}

commit 3 "An old paragraph-long subject from before the rule existed, with no area at all, ending in a period."
mkdir scripts
cp "$script" scripts/
git add scripts
git commit -q -m "scripts: add the commit message check"
expect 0 "0 commit(s)"

commit 3 "slab_cache: fold the probe loop"
commit 40 "docs/design, tests: move the rule table

The why, and the numbers."
expect 0 "2 commit(s) .*, 0 with"

rejects() { # rejects LINES MESSAGE PATTERN: that commit alone fails the check
	commit "$1" "$2"
	expect 1 "$3"
	git reset -q --hard HEAD^
}
rejects 3 "engine: $(printf 'x%.0s' $(seq 70))" "subject is 78 characters"
rejects 3 "Fix the thing" "not 'area: imperative summary'"
rejects 3 "engine: Fix the thing" "not 'area: imperative summary'"
rejects 3 "engine: fix the thing." "not 'area: imperative summary'"
rejects 3 "engine: fix the thing
the body without a blank line" "second line is not blank"
rejects 40 "engine: fix the thing" "no body, for 40 changed lines"

expect 0 ", 0 with"
echo "test_check_commits: all cases behaved"
