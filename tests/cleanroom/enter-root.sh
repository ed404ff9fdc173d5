#!/usr/bin/env bash
# Run a command inside an unpacked Debian root, the way a buildd chroot runs
# it: a fresh /proc, a read-only /sys (cgroups included), a /dev with only the
# usual nodes, its own /dev/pts and an empty /dev/shm.
#
#   tests/cleanroom/enter-root.sh [--user UID] ROOT COMMAND...
#
# Host-wide knobs stay out of reach: /proc/sys and /sys are read-only, so a
# test that would change the host (a hugepage pool, a THP mode) fails instead.
# Everything runs in new mount and PID namespaces: the mounts exist only
# there, so they vanish when the command ends, whatever way it ends (a trap
# unmounts them too), and no process outlives it.  The host's mount table
# never shows them.  Run as root; the command runs as root or as UID.
set -euo pipefail

if [ "${1-}" != --inside ]; then
	# Private mount propagation: nothing mounted below reaches the host;
	# --kill-child: when this ends (or is killed), everything inside dies.
	exec unshare --mount --pid --fork --kill-child --propagation private -- "$0" --inside "$@"
fi
shift
user=
if [ "${1-}" = --user ]; then
	user=$2
	shift 2
fi
root=$(realpath "${1:?usage: enter-root.sh [--user UID] ROOT COMMAND...}")
shift
[ -x "$root/bin/sh" ] || {
	echo "enter-root.sh: $root is not an unpacked root (no bin/sh)" >&2
	exit 2
}

mounted=()
mnt() { # mnt TARGET MOUNT-ARGS...: mount and remember it for the trap
	local target=$1
	shift
	mount "$@" "$target"
	mounted+=("$target")
}
# shellcheck disable=SC2317 # run by the trap
unmount_all() {
	local i
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap unmount_all EXIT

mkdir -p "$root/proc" "$root/sys" "$root/dev"
mnt "$root/proc" -t proc -o nosuid,nodev,noexec proc
mnt "$root/proc/sys" --bind "$root/proc/sys"
mount -o remount,bind,ro "$root/proc/sys"
mnt "$root/sys" -t sysfs -o ro,nosuid,nodev,noexec sysfs
mnt "$root/sys/fs/cgroup" -t cgroup2 -o ro,nosuid,nodev,noexec cgroup2
mnt "$root/dev" -t tmpfs -o mode=755,nosuid,size=64k devtmp
for node in null zero full random urandom tty; do
	touch "$root/dev/$node"
	mnt "$root/dev/$node" --bind "/dev/$node"
done
mkdir -m 755 "$root/dev/pts"
mkdir -m 1777 "$root/dev/shm"
mnt "$root/dev/pts" -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts
mnt "$root/dev/shm" -t tmpfs -o mode=1777,nosuid,nodev shm
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"

home=/root
userspec=()
if [ -n "$user" ]; then
	home=$(chroot "$root" getent passwd "$user" | cut -d: -f6)
	userspec=(--userspec="$user:$user")
fi
# A clean environment, as a build daemon gives (no pyenv on PATH).
set +e
chroot "${userspec[@]}" "$root" /usr/bin/env -i HOME="$home" LC_ALL=C.UTF-8 TERM=dumb \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	${MOONCAKE_SEGMENT_CI_NESTED:+MOONCAKE_SEGMENT_CI_NESTED=$MOONCAKE_SEGMENT_CI_NESTED} "$@"
status=$?
set -e
exit $status
