#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the README's two commands in a minimal Debian 12 root, as on a
# machine that has nothing but Debian's base system: a dependency that the
# build machines happen to have (g++, libc6-dev, the fuzzer runtime) shows
# up here and nowhere else.
#
#   scripts/check-fresh-debian.sh [run] [test]    (default: run test)
#
# Needs root (a chroot) and Debian's package archive. The root is built with
# mmdebstrap --variant=minbase (installed from the archive when missing),
# the working tree (tracked and untracked files, not the ignored build/)
# is copied to /src in it, and each command runs there from scratch, its
# own install-deps included. KVA_FRESH_MIRROR picks the mirror; KVA_FRESH_KEEP=1
# keeps the root (its path is printed) for a look afterwards.
#
# Exit status: 0 both passed, 1 a command failed in the root, 2 usage,
# 3 this machine could not build or enter a root (no archive, no mounts):
# nothing was checked, and the reason is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
commands=("$@")
[ ${#commands[@]} -gt 0 ] || commands=(run test)
for c in "${commands[@]}"; do
	case $c in run | test) ;; *)
		echo "check-fresh-debian: unknown command '$c' (run, test)" >&2
		exit 2
		;;
	esac
done
if [ "$(id -u)" -ne 0 ]; then
	echo "check-fresh-debian: needs root (it builds and enters a chroot)" >&2
	exit 2
fi
mirror=${KVA_FRESH_MIRROR:-http://deb.debian.org/debian}

if ! command -v mmdebstrap >/dev/null; then
	echo "check-fresh-debian: installing mmdebstrap" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends mmdebstrap >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends mmdebstrap >/dev/null; } ||
		{ echo "check-fresh-debian: cannot install mmdebstrap; nothing checked" >&2; exit 3; }
fi

root=$(mktemp -d /tmp/kvadmit-fresh.XXXXXX)
mounted=()
cleanup() {
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
	if [ "${KVA_FRESH_KEEP:-0}" = 1 ]; then
		echo "check-fresh-debian: root kept at $root"
	else
		rm -rf --one-file-system "$root"
	fi
}
trap cleanup EXIT

t0=$(date +%s)
echo "check-fresh-debian: building a minimal Debian 12 root in $root"
mmdebstrap --quiet --variant=minbase --mode=root bookworm "$root" "$mirror" ||
	{ echo "check-fresh-debian: mmdebstrap could not build the root; nothing checked" >&2; exit 3; }
echo "check-fresh-debian: root ready in $(($(date +%s) - t0)) s; installed packages:" \
	"$(chroot "$root" dpkg-query -W -f='${Package}\n' | wc -l)"

# The working tree as a new user would have it: no build outputs.
mkdir "$root/src"
# (--ignore-failed-read: a tracked file deleted in the working tree is skipped)
git ls-files -z --cached --others --exclude-standard |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$root/src"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
for m in proc sys dev dev/pts; do
	case $m in
	proc) mount -t proc proc "$root/proc" ;;
	sys) mount -t sysfs sys "$root/sys" ;;
	dev) mount --bind /dev "$root/dev" ;;
	dev/pts) mount -t devpts devpts "$root/dev/pts" ;;
	esac || { echo "check-fresh-debian: cannot mount /$m in the root; nothing checked" >&2; exit 3; }
	mounted+=("$root/$m")
done

inroot() {
	chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/bash -c "$1"
}
# The README's one prerequisite: make itself (minbase has none).
inroot "apt-get update -qq && apt-get install -y -qq --no-install-recommends make >/dev/null" ||
	{ echo "check-fresh-debian: cannot install make in the root; nothing checked" >&2; exit 3; }

status=0
for c in "${commands[@]}"; do
	t=$(date +%s)
	echo "check-fresh-debian: make $c in the fresh root"
	if inroot "cd /src && make $c"; then
		echo "check-fresh-debian: make $c passed in $(($(date +%s) - t)) s"
	else
		echo "check-fresh-debian: make $c FAILED after $(($(date +%s) - t)) s"
		status=1
	fi
done
exit $status
