#!/usr/bin/env bash
# Build the Debian and RPM packages, with their tests, the way the
# distributions do: in a plain chroot of a minimal Debian 12 root holding only
# the declared Build-Depends.  The debs build as root, as pbuilder and a
# newcomer's container do (a chroot refuses some namespaces even to root: the
# tests that need them must skip, not fail); the rpms as the unprivileged
# user "builder", as mock and sbuild do (the root-only tests skip there).
#
#   tests/cleanroom/build-packages.sh [SOURCE-DIR] [--tarball FILE] [--as-root|--as-user] [--keep] [--no-rpm]
#
# 1. the cached buildd root (make-root.sh) is unpacked into a scratch dir;
# 2. a copy of the source goes in (a git tree: its tracked and untracked,
#    not ignored files; otherwise the --tarball, else the whole directory);
# 3. `apt-get build-dep ./` installs exactly debian/control's Build-Depends;
# 4. `dpkg-buildpackage -us -uc -b` runs with its tests (dh_auto_test) as
#    root (--as-user: as "builder");
# 5. `rpm` is added, and `rpmbuild -ta --nodeps` runs with %check on the dist
#    tarball (--tarball FILE, or one made by `make dist` inside the root) as
#    "builder" (--as-root: as root).
# Each step is timed; a failing step shows the tail of its log.  Ends with
# one "PASS|FAIL clean room: ..." line per package build (a failed deb build
# does not stop the rpm build); the exit status is non-zero if any failed.  The scratch dir is removed unless --keep.
# Needs root, mmdebstrap, unshare and the Debian mirror of this host's apt.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tarball='' deb_user=root rpm_user=builder keep='' rpm=yes
while [ $# -gt 0 ]; do
	case $1 in
	--tarball) tarball=$(realpath "$2") && shift ;;
	--as-root) deb_user=root rpm_user=root ;;
	--as-user) deb_user=builder rpm_user=builder ;;
	--keep) keep=yes ;;
	--no-rpm) rpm= ;;
	-*) echo "build-packages.sh: unknown option $1" >&2 && exit 2 ;;
	*) src=$(cd "$1" && pwd) ;;
	esac
	shift
done

t0=$SECONDS
timings=()
step_name='' step_start=''
step() { # step NAME: start a timed step (ends the previous one)
	end_step
	step_name=$*
	step_start=$SECONDS
	printf '=== cleanroom: %s (%s)\n' "$step_name" "$(date +%T)"
}
end_step() {
	[ -n "$step_name" ] && timings+=("$(printf '%4d s  %s' $((SECONDS - step_start)) "$step_name")")
	step_name=
}
# failed LOG: say which step failed and show the log's tail.
failed() {
	local log=$1
	echo "=== cleanroom: FAILED: $step_name (after $((SECONDS - step_start)) s)"
	if grep -qE '^(FAIL|ERROR):' "$log"; then
		echo "  failing tests (their output is in $log, above the summary):"
		grep -E '^(FAIL|ERROR):' "$log" | sort -u | sed 's/^/  | /'
	fi
	echo "  last lines of $log:"
	tail -n 40 "$log" | sed 's/^/  | /'
}
# result PASS|FAIL NAME: one line per package build, as .ci/run's stages print.
results=()
result() {
	results+=("$1 clean room: $2")
	[ "$1" = PASS ] || status=1
}
status=0

[ "$(id -u)" = 0 ] || {
	echo "build-packages.sh: run as root (it unpacks a root and chroots into it)" >&2
	exit 2
}
work=$(mktemp -d /var/tmp/mooncake-segment-cleanroom.XXXXXX)
root=$work/root
# shellcheck disable=SC2317 # run by the trap
cleanup() {
	end_step
	if [ ${#timings[@]} -gt 0 ]; then
		echo "=== cleanroom: timings (total $((SECONDS - t0)) s)"
		printf '  %s\n' "${timings[@]}"
	fi
	# The mounts lived in enter-root.sh's own namespace; refuse to delete
	# anything that is still a mount point here all the same.
	if findmnt -rn -o TARGET | grep -q "^$work"; then
		echo "cleanroom: mounts remain under $work, not removing it" >&2
	elif [ -n "$keep" ]; then
		echo "=== cleanroom: kept $work"
	else
		rm -rf "$work"
	fi
	[ ${#results[@]} -eq 0 ] || printf '%s\n' "${results[@]}"
}
trap cleanup EXIT
in_root() { "$here/enter-root.sh" "$root" "$@"; }
as_builder() {
	"$here/enter-root.sh" --user 1000 "$root" "$@"
}
# as USER COMMAND...: run as root or as "builder".
as() {
	local user=$1
	shift
	if [ "$user" = root ]; then in_root "$@"; else as_builder "$@"; fi
}

step "base root (cached tarball)"
base=$("$here/make-root.sh" buildd)
step "unpack the root"
mkdir "$root"
tar -xf "$base" -C "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"

step "copy the source"
mkdir -p "$root/build/deb/mooncake-segment" "$root/build/src"
# A git tree: its tracked and untracked-but-not-ignored files (no build
# outputs, even after an in-tree configure).  Otherwise the release tarball
# when given (pristine), else the whole directory.
copy_source() {
	if command -v git >/dev/null && git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git -C "$src" ls-files -z --cached --others --exclude-standard |
			(cd "$src" && tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$1"
	elif [ -n "$tarball" ]; then
		tar -xf "$tarball" -C "$1" --strip-components=1
	else
		tar -C "$src" -cf - . | tar -xf - -C "$1"
	fi
}
copy_source "$root/build/deb/mooncake-segment"
copy_source "$root/build/src"
if [ -n "$tarball" ]; then cp "$tarball" "$root/build/"; fi
in_root useradd --uid 1000 --user-group --create-home builder
in_root chown -R builder:builder /build

step "install the Build-Depends (apt-get build-dep ./)"
before=$(in_root dpkg-query -W -f '.\n' | wc -l)
in_root sh -c 'apt-get update -q && cd /build/deb/mooncake-segment &&
	DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q --no-install-recommends ./' \
	>"$work/build-dep.log" 2>&1 || {
	failed "$work/build-dep.log"
	result FAIL "apt-get build-dep ./ (only the declared Build-Depends)"
	exit 1
}
echo "  $(($(in_root dpkg-query -W -f '.\n' | wc -l) - before)) packages added to the base root"

step "dpkg-buildpackage -us -uc -b (with dh_auto_test) as $deb_user"
deb_name="dpkg-buildpackage -us -uc -b with its tests as $deb_user in a chroot, only the Build-Depends"
if as "$deb_user" sh -c 'cd /build/deb/mooncake-segment && nice dpkg-buildpackage -us -uc -b' >"$work/deb.log" 2>&1; then
	grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$work/deb.log" | sed 's/^/  /' || true
	find "$root/build/deb" -maxdepth 1 -name '*.deb' | sed 's,.*/,  ,'
	result PASS "$deb_name"
else
	failed "$work/deb.log"
	result FAIL "$deb_name"
fi

if [ -n "$rpm" ]; then
	step "install rpm"
	rpm_name="rpmbuild -ta --nodeps with %check as $rpm_user in a chroot, only the Build-Depends and rpm"
	in_root sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends rpm' \
		>"$work/rpm-install.log" 2>&1 || {
		failed "$work/rpm-install.log"
		result FAIL "$rpm_name"
		exit 1
	}
	if [ -z "$tarball" ]; then
		step "make dist (in the root, from a pristine copy)"
		as_builder sh -c 'cd /build/src && autoreconf -fi && mkdir /build/dist && cd /build/dist &&
			/build/src/configure -q PYTHON=/usr/bin/python3 && nice make -s dist && mv mooncake-segment-*.tar.* /build/' \
			>"$work/dist.log" 2>&1 || {
			failed "$work/dist.log"
			result FAIL "$rpm_name"
			exit 1
		}
	fi
	step "rpmbuild -ta --nodeps (with %check) as $rpm_user"
	if as "$rpm_user" sh -c 'nice rpmbuild -ta --nodeps --define "_topdir /build/rpm" /build/mooncake-segment-*.tar.*' \
		>"$work/rpm.log" 2>&1; then
		grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$work/rpm.log" | sed 's/^/  /' || true
		find "$root/build/rpm/RPMS" "$root/build/rpm/SRPMS" -name '*.rpm' | sed 's,.*/,  ,'
		result PASS "$rpm_name"
	else
		failed "$work/rpm.log"
		result FAIL "$rpm_name"
	fi
fi
end_step
exit $status
