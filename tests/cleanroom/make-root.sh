#!/usr/bin/env bash
# Build (once) and cache a minimal Debian 12 root as a tarball; print its path.
#
#   tests/cleanroom/make-root.sh VARIANT [PACKAGE...]
#
# VARIANT is mmdebstrap's: "buildd" (essential + apt + build-essential, what
# a buildd starts from) for the clean-room package builds, "important" (what
# the Debian installer puts on a machine before any task is chosen) for the
# fresh-machine run.  PACKAGEs are added with --include.  The root comes from
# the Debian mirror this host already uses (its apt sources), so it needs no
# other network.
#
# The cache lives in $MOONCAKE_SEGMENT_CI_CACHE (default
# /var/cache/mooncake-segment-ci), keyed by a hash of what goes into the root
# (suite, variant, mirrors, packages, this script's format), never by date:
# a cached root is reused until the inputs change.  Delete the file to refresh
# it.  Progress goes to stderr; only the tarball's path goes to stdout.
set -euo pipefail

format=1 # bump when the way the root is made changes
suite=bookworm
variant=${1:?usage: make-root.sh VARIANT [PACKAGE...]}
shift
packages=$(printf '%s\n' "$@" | sort -u | paste -sd, -)
cache=${MOONCAKE_SEGMENT_CI_CACHE:-/var/cache/mooncake-segment-ci}

# The host's Debian mirror (deb822 .sources or one-line sources.list).
debian_uri() {
	local want=$1
	{ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } |
		grep -oE 'https?://[^ ]+' | sed 's,/*$,,' | { grep -E "/$want\$" || true; } | head -1
}
mirror=$(debian_uri debian)
security=$(debian_uri debian-security)
if [ -z "$mirror" ]; then
	echo "make-root.sh: no Debian mirror (…/debian) in /etc/apt/sources.list*; add one or set up apt first" >&2
	exit 1
fi
sources=("deb $mirror $suite main" "deb $mirror $suite-updates main")
[ -n "$security" ] && sources+=("deb $security $suite-security main")

key=$(printf '%s\n' "$format" "$suite" "$variant" "$packages" "${sources[@]}" | sha256sum | cut -c1-16)
tarball=$cache/$suite-$variant-$key.tar
mkdir -p "$cache"

exec 9>"$tarball.lock"
flock 9 # one builder at a time; the others wait and reuse its result
if [ -s "$tarball" ]; then
	echo "make-root.sh: cached $suite/$variant root $tarball ($(du -h "$tarball" | cut -f1))" >&2
	echo "$tarball"
	exit 0
fi

echo "make-root.sh: building the $suite/$variant root${packages:+ with $packages} from $mirror (a few minutes)..." >&2
start=$SECONDS
tmp=$(mktemp "$tarball.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# --skip=output/dev: device nodes are made per run by enter-root.sh, not
# shipped in the tarball.
nice mmdebstrap --quiet --variant="$variant" --format=tar \
	${packages:+--include="$packages"} --skip=output/dev \
	"$suite" "$tmp" "${sources[@]}" >&2
mv "$tmp" "$tarball"
trap - EXIT
echo "make-root.sh: built $tarball ($(du -h "$tarball" | cut -f1)) in $((SECONDS - start)) s" >&2
echo "$tarball"
