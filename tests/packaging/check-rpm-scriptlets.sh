#!/usr/bin/env bash
# Every package that ships systemd units stops and disables them on removal,
# applies the presets on install and reloads on upgrade: an enabled timer or
# socket must never outlive its program.  Reads the built RPMs' scriptlets.
#   usage: check-rpm-scriptlets.sh RPM...
# Prints "PASS ..."/"FAIL ..." lines; exits 1 on a failure.
set -euo pipefail
status=0
# section SCRIPTS NAME: the body of one scriptlet ("preuninstall", ...) in
# what `rpm -qp --scripts` printed.
section() {
	awk -v want="$2" '
		/^[a-z]+ scriptlet/ { on = ($1 == want); next }
		on { print }' <<<"$1"
}
# Debian's rpm expands the spec's fallbacks (systemctl preset / disable --now
# / daemon-reload), Fedora's systemd-rpm-macros call systemd-update-helper.
check() {
	local rpm=$1 units=$2 name unit scripts
	name=$(rpm -qp --qf '%{NAME}' "$rpm" 2>/dev/null)
	scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null)
	for unit in $units; do
		if section "$scripts" postinstall | grep -Eq "(preset|install-system-units).*$unit" &&
			section "$scripts" preuninstall | grep -Eq "(disable --now|remove-system-units).*$unit" &&
			section "$scripts" postuninstall | grep -Eq 'daemon-reload|systemd-update-helper'; then
			echo "PASS rpm $name: scriptlets preset, stop and disable $unit"
		else
			echo "FAIL rpm $name: scriptlets do not preset, stop and disable $unit"
			status=1
		fi
	done
}
for rpm in "$@"; do
	units=$(rpm -qlp "$rpm" 2>/dev/null | grep -E '/systemd/system/[^/]+\.(timer|socket)$' | xargs -r -n1 basename || true)
	[ -n "$units" ] && check "$rpm" "$units"
done
exit "$status"
