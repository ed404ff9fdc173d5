#!/usr/bin/env bash
# shellcheck disable=SC2317 # the checks are functions that check() runs
# The keeper as operators run it, under a REAL systemd: the built debs
# installed in a Debian 12 root booted with `systemd-nspawn -b`, driven from
# here with nsenter.  Each promise of doc/keeper.md that only a real service
# manager can prove is one "PASS|FAIL systemd: ..." line on stdout (the
# progress and, on a failure, the evidence go to stderr):
#
#   shipped disabled; socket activation on the first client; a kept
#   segment's pages through `systemctl restart`, `kill -9` and a crash loop
#   (never start-limit-hit, the descriptor store kept); `list` joins the
#   kept segments to the restarted keeper; the textfile timer's metrics
#   scraped by the real node_exporter; an upgrade that changes the unit
#   reloads systemd without restarting the keeper; a purge leaves no unit,
#   no metrics and no /run/mooncake-segment.
#
#   tests/systemd/check-under-systemd.sh DEB-DIR
#
# DEB-DIR holds the built libmooncake-segment0, python3-mooncake-segment,
# mooncake-segment-tools and mooncake-segmentd debs.  Exits 0 whatever the
# outcome (the lines carry it); prints one SKIP line, with the reason, where
# it cannot run (not root, no systemd-nspawn, a boot that does not come up
# because the environment refuses it).  The fake service manager's tests
# (tests/keeper/test_restart.py, test_service_state.py) stay the fast ones
# that run everywhere; this is the real thing, in .ci/run.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
debdir=$(realpath "${1:?usage: check-under-systemd.sh DEB-DIR}")
name="systemd: the keeper under a real systemd (systemd-nspawn -b)"
say() { echo "=== systemd: $* ($(date +%T))" >&2; }
skip() {
	echo "SKIP $name: $*"
	exit 0
}

[ "$(id -u)" = 0 ] || skip "needs root to unpack and boot a Debian root"
for tool in systemd-nspawn nsenter; do
	command -v $tool >/dev/null || skip "$tool not found (apt-get install systemd-container util-linux)"
done
for pkg in libmooncake-segment0 python3-mooncake-segment mooncake-segment-tools mooncake-segmentd; do
	ls "$debdir"/${pkg}_*.deb >/dev/null 2>&1 || {
		echo "FAIL $name: no ${pkg}_*.deb in $debdir"
		exit 0
	}
done

say "the root (cached tarball: systemd, node_exporter and the debs' dependencies)"
base=$("$here/../cleanroom/make-root.sh" minbase systemd systemd-sysv dbus libnuma1 python3 python3-numpy \
	prometheus-node-exporter) || {
	echo "FAIL $name: cannot build the root (tests/cleanroom/make-root.sh)"
	exit 0
}
work=$(mktemp -d /var/tmp/mooncake-segment-nspawn.XXXXXX)
root=$work/root
nspawn_pid=
# shellcheck disable=SC2317 # run by the trap
cleanup() {
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		kill "$nspawn_pid" 2>/dev/null
		for _ in $(seq 20); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
		kill -9 "$nspawn_pid" 2>/dev/null
		wait "$nspawn_pid" 2>/dev/null
	fi
	if findmnt -rn -o TARGET | grep -q "^$work"; then
		echo "systemd: mounts remain under $work, not removing it" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
mkdir "$root"
tar -xf "$base" -C "$root"

say "install the debs (as an image build would: no systemd running)"
mkdir "$root/debs"
for pkg in libmooncake-segment0 python3-mooncake-segment mooncake-segment-tools mooncake-segmentd; do
	cp "$debdir"/${pkg}_*.deb "$root/debs/"
done
cp "$here/kept_client.py" "$root/kept_client.py"
if ! "$here/../cleanroom/enter-root.sh" "$root" sh -c 'dpkg -i /debs/*.deb' >"$work/install.log" 2>&1; then
	tail -20 "$work/install.log" >&2
	echo "FAIL $name: dpkg -i of the debs in the root"
	exit 0
fi

# The upgrade: the same mooncake-segmentd with a higher version and a unit
# that differs by one line, as a new release that changes the unit would.
say "an upgrade of mooncake-segmentd whose unit changed"
up=$work/upgrade
dpkg-deb -R "$debdir"/mooncake-segmentd_*.deb "$up"
sed -i 's/^Version: .*/&+unitchange1/' "$up/DEBIAN/control"
sed -i 's/^\[Service\]$/&\nEnvironment=MOONCAKE_SEGMENTD_UNIT_CHANGED=1/' "$up/lib/systemd/system/mooncake-segmentd.service"
(cd "$up" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | xargs -0 md5sum >DEBIAN/md5sums)
dpkg-deb -b "$up" "$root/debs/upgrade.deb" >/dev/null

say "boot"
systemd-nspawn -q -b -D "$root" --register=no --keep-unit --private-network \
	--machine=mooncake-ci >"$work/console.log" 2>&1 &
nspawn_pid=$!
leader=
for _ in $(seq 100); do
	leader=$(pgrep -P "$nspawn_pid" -x systemd | head -1)
	[ -n "$leader" ] && break
	kill -0 "$nspawn_pid" 2>/dev/null || break
	sleep 0.2
done
in_root() { # a command inside the booted root, as root, in all its namespaces
	timeout 120 nsenter -t "$leader" -a -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"
}
# systemctl answers only once PID 1 has made its private socket: ask again until then.
state=
for _ in $(seq 60); do
	[ -n "$leader" ] || break
	state=$(in_root systemctl is-system-running --wait 2>/dev/null)
	case $state in running | degraded) break ;; esac
	kill -0 "$nspawn_pid" 2>/dev/null || break
	sleep 1
done
case $state in
running | degraded) ;;
*)
	tail -20 "$work/console.log" >&2
	skip "the root did not boot under systemd-nspawn -b (state '${state:-none}'): this environment refuses it (see the console above)"
	;;
esac
[ "$state" = degraded ] && in_root systemctl --failed --no-legend >&2

# --- the checks -----------------------------------------------------------
results=()
check() { # check NAME COMMAND...: one PASS or FAIL line; the evidence on a FAIL
	local what=$1
	shift
	# Not in a $(...) subshell: a check may set what the next ones read.
	if "$@" >"$work/check.out" 2>&1; then
		results+=("PASS systemd: $what")
	else
		results+=("FAIL systemd: $what")
		{ echo "--- FAILED: $what" && cat "$work/check.out"; } | sed 's/^/  | /' >&2
		in_root journalctl -u mooncake-segmentd.service -u mooncake-segmentd.socket -n 30 --no-pager >&2
	fi
}
client() { in_root python3 /kept_client.py "$@"; }
kill9() { in_root sh -c "kill -9 $1"; } # the shell's kill: a minimal root has no procps
prop() { in_root systemctl show -P "$2" "$1"; }
keeper_pid() { prop mooncake-segmentd.service MainPID; }
# wait_active: the service running under a new pid (not $1), the pages back.
wait_restarted() {
	local old=$1 pid
	for _ in $(seq 100); do
		pid=$(keeper_pid)
		if [ "$pid" != 0 ] && [ "$pid" != "$old" ] && [ "$(prop mooncake-segmentd.service ActiveState)" = active ]; then
			return 0
		fi
		sleep 0.1
	done
	echo "the keeper did not come back (pid $(keeper_pid), $(prop mooncake-segmentd.service ActiveState)/$(prop mooncake-segmentd.service SubState))"
	return 1
}
warm_and_intact() { # the segment kept since the first client: warm, same generation, the pattern
	local got
	got=$(client read nspawn-kv) || return 1
	echo "$got"
	[ "$got" = "{\"warm\": true, \"generation\": $generation, \"head\": \"kept-by-systemd!\"}" ]
}

shipped_disabled() {
	[ "$(in_root systemctl is-enabled mooncake-segmentd.socket)" = disabled ] &&
		[ "$(in_root systemctl is-enabled mooncake-segment-textfile.timer)" = disabled ] &&
		[ "$(prop mooncake-segmentd.service ActiveState)" = inactive ]
}
check "the units ship disabled and stopped" shipped_disabled

activated() {
	local got
	in_root systemctl enable --now mooncake-segmentd.socket || return 1
	[ "$(prop mooncake-segmentd.service ActiveState)" = inactive ] || return 1
	got=$(client write nspawn-kv) || return 1
	echo "$got"
	generation=$(sed -n 's/.*"generation": \([0-9]*\).*/\1/p' <<<"$got")
	[ -n "$generation" ] && [ "$(prop mooncake-segmentd.service ActiveState)" = active ] &&
		[ "$(in_root mooncake-segment keep stat nspawn-kv --json | grep -c '"generation"')" -ge 1 ]
}
generation=
check "the socket activates the keeper on the first client, which keeps a segment" activated

one_start_line() {
	local log
	log=$(in_root journalctl -u mooncake-segmentd.service -o cat --no-pager)
	echo "$log"
	[ "$(grep -c 'listening on' <<<"$log")" = 1 ] && ! grep -q 'FileDescriptorStoreMax' <<<"$log"
}
check "one line at start says where the keeper listens, and no hedge about the store" one_start_line

restarted() {
	local old
	old=$(keeper_pid)
	in_root systemctl restart mooncake-segmentd.service && wait_restarted "$old" && warm_and_intact
}
check "systemctl restart keeps the pages (warm, same generation, same bytes)" restarted

killed() {
	local old
	old=$(keeper_pid)
	kill9 "$old" && wait_restarted "$old" && warm_and_intact
}
check "kill -9: systemd restarts the keeper and the pages are back" killed

# A plain kill (SIGTERM) or SIGHUP from outside systemd is a clean exit to
# it: with Restart=on-failure the unit would stop and drop the store.
terminated() {
	local old signal
	for signal in TERM HUP; do
		old=$(keeper_pid)
		in_root sh -c "kill -$signal $old" && wait_restarted "$old" && warm_and_intact || return 1
	done
}
check "kill (SIGTERM) and SIGHUP from outside systemd: restarted, the pages are back" terminated

crash_loop() {
	local old stored
	for _ in $(seq 8); do
		old=$(keeper_pid)
		kill9 "$old" || return 1
		wait_restarted "$old" || return 1
	done
	for _ in $(seq 8); do in_root systemctl restart mooncake-segmentd.service || return 1; done
	stored=$(prop mooncake-segmentd.service NFileDescriptorStore)
	echo "after 8 kill -9 and 8 restarts: $(prop mooncake-segmentd.service ActiveState), Result=$(prop mooncake-segmentd.service Result), $stored stored, socket $(prop mooncake-segmentd.socket ActiveState)"
	[ "$(prop mooncake-segmentd.service ActiveState)" = active ] && [ "$stored" -ge 2 ] &&
		[ "$(prop mooncake-segmentd.socket ActiveState)" = active ] && in_root mooncake-segment keep health &&
		warm_and_intact
}
check "a crash loop (8 kill -9, then 8 restarts, in seconds) never hits a start limit nor drops the store" crash_loop

listed_after_restart() {
	local json
	json=$(in_root mooncake-segment list --json) || return 1
	echo "$json"
	python3 -c '
import json, sys
segs = [s for s in json.load(sys.stdin)["segments"] if "nspawn-kv" in s.get("label", "")]
assert len(segs) == 1 and segs[0].get("keeper"), segs
assert segs[0]["keeper"]["generation"] == int(sys.argv[1]), segs
' "$generation" <<<"$json"
}
check "list joins the kept segment to the restarted keeper's record" listed_after_restart

metrics_scraped() {
	local body
	in_root systemctl enable --now mooncake-segment-textfile.timer || return 1
	in_root systemctl start mooncake-segment-textfile.service || return 1
	in_root systemctl is-active prometheus-node-exporter.service || return 1
	for _ in $(seq 50); do
		body=$(in_root python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9100/metrics", timeout=5).read().decode())') &&
			grep -q '^mooncake_segment_' <<<"$body" && break
		sleep 0.2
	done
	grep -E '^(mooncake_segment_keeper_warm_attaches|node_textfile_scrape_error)' <<<"$body"
	grep -q '^node_textfile_scrape_error 0$' <<<"$body" &&
		grep -q '^mooncake_segment_keeper_warm_attaches{.*nspawn-kv' <<<"$body"
}
check "the textfile timer's metrics are scraped by node_exporter (scrape_error 0, the keeper's figures)" metrics_scraped

# The environment the running keeper got from its unit.
running_environment() {
	# shellcheck disable=SC2016 # expanded inside the root
	in_root sh -c 'tr "\0" "\n" </proc/$(systemctl show -P MainPID mooncake-segmentd.service)/environ'
}
upgraded() {
	local old
	old=$(keeper_pid)
	in_root dpkg -i /debs/upgrade.deb >/dev/null || return 1
	echo "NeedDaemonReload=$(prop mooncake-segmentd.service NeedDaemonReload), pid $old -> $(keeper_pid)"
	[ "$(prop mooncake-segmentd.service NeedDaemonReload)" = no ] && [ "$(keeper_pid)" = "$old" ] &&
		in_root systemctl restart mooncake-segmentd.service && wait_restarted "$old" &&
		running_environment | grep -qx MOONCAKE_SEGMENTD_UNIT_CHANGED=1 && warm_and_intact
}
check "an upgrade that changes the unit reloads systemd, restarts nothing, and the next restart runs the new unit" upgraded

purged() {
	in_root test -s /var/lib/prometheus/node-exporter/mooncake-segment.prom || {
		echo "no metrics file before the purge"
		return 1
	}
	in_root apt-get purge -y -q mooncake-segment-tools mooncake-segmentd >/dev/null || return 1
	local left
	left=$(in_root sh -c 'ls -d /var/lib/prometheus/node-exporter/mooncake-segment.prom* /run/mooncake-segment \
		/lib/systemd/system/mooncake-segment* /etc/systemd/system/*/mooncake-segment* 2>/dev/null')
	echo "left: ${left:-nothing}; mooncake-segmentd.socket $(prop mooncake-segmentd.socket LoadState)"
	[ -z "$left" ] && [ "$(prop mooncake-segmentd.socket LoadState)" = not-found ]
}
check "a purge leaves no unit, no metrics for node_exporter and no /run/mooncake-segment" purged

printf '%s\n' "${results[@]}"
in_root systemctl poweroff >/dev/null 2>&1
for _ in $(seq 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
exit 0
