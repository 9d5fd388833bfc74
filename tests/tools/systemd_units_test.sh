#!/usr/bin/env bash
# Checks the systemd units in configs/ with `systemd-analyze verify`, plus the directives the
# service depends on (docs/operations.md, "Run as a service").
#   usage: systemd_units_test.sh SOURCE_DIR SUPERVISOR_BINARY
# Exit 0: pass; 1: fail; 77: skipped (ctest SKIP_RETURN_CODE), when systemd-analyze is missing or
# cannot run at all here.
#
# Why copies: verify insists that ExecStart's program exists and is executable, and the units name
# the installed /usr/local/bin/torchfarm-supervisor. So verify reads temporary copies whose
# ExecStart points at the binary just built (or /bin/true when it is not built); every other line
# is checked as installed. Why the output is read: verify exits 0 after unknown keys and
# unparsable values, which it only warns about, so any line that names our units fails the test.
# Lines about other units (the host's own, pulled in as dependencies) are shown and ignored.
set -u

src=${1:?source dir}
binary=${2:-}
units=(torchfarm.service torchfarm@.service)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Directives the service relies on; dropping one would pass verify and break the service.
for unit in "${units[@]}"; do
  file="$src/configs/$unit"
  for directive in Type=notify NotifyAccess=main 'ExecReload=/bin/kill -HUP $MAINPID' \
      Restart=on-failure WatchdogSec=30 KillMode=mixed TimeoutStopSec=60 NoNewPrivileges=yes \
      ProtectSystem=strict ProtectHome=yes PrivateTmp=yes ReadWritePaths=/dev/shm \
      'RuntimeDirectory=torchfarm' LimitNOFILE=65536; do
    grep -q -x -F "$directive" "$file" || grep -q -x -F "$directive/%i" "$file" ||
      fail "$unit: no line '$directive'"
  done
done
grep -q -x -F 'ExecStart=/usr/local/bin/torchfarm-supervisor --config /etc/torchfarm/torchfarm.json' \
  "$src/configs/torchfarm.service" || fail "torchfarm.service: unexpected ExecStart"
grep -q -x -F 'ExecStart=/usr/local/bin/torchfarm-supervisor --config /etc/torchfarm/%i.json' \
  "$src/configs/torchfarm@.service" || fail "torchfarm@.service: unexpected ExecStart"
grep -q -x -F 'RuntimeDirectory=torchfarm/%i' "$src/configs/torchfarm@.service" ||
  fail "torchfarm@.service: instances need their own RuntimeDirectory=torchfarm/%i"

if ! command -v systemd-analyze > /dev/null; then
  echo "SKIP: systemd-analyze not found (Debian: apt-get install systemd); directive checks ran"
  [ "$failures" -eq 0 ] && exit 77 || exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stand_in=$binary
if [ -z "$stand_in" ] || [ ! -x "$stand_in" ]; then
  echo "note: '$binary' is not built; verifying with ExecStart=/bin/true"
  stand_in=/bin/true
fi
for unit in "${units[@]}"; do
  sed "s#^ExecStart=/usr/local/bin/torchfarm-supervisor #ExecStart=$stand_in #" \
    "$src/configs/$unit" > "$tmp/$unit"
done

# The template is verified as an instance, the way systemctl would load it.
output=$(cd "$tmp" && systemd-analyze verify --man=no "$tmp/torchfarm.service" \
  "$tmp/torchfarm@test.service" 2>&1)
status=$?
ours=$(printf '%s\n' "$output" | grep -E "$tmp|torchfarm" || true)
others=$(printf '%s\n' "$output" | grep -v -E "$tmp|torchfarm" | grep -v '^$' || true)
[ -n "$others" ] && printf 'ignored (not about our units):\n%s\n' "$others"
if [ -n "$ours" ]; then
  fail "systemd-analyze verify:"
  printf '%s\n' "$ours"
elif [ "$status" -ne 0 ]; then
  # Nothing said about our units, yet verify failed: it could not run in this environment.
  echo "SKIP: systemd-analyze verify exited $status without naming our units"
  [ "$failures" -eq 0 ] && exit 77 || exit 1
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS: ${units[*]} verified (systemd $(systemd-analyze --version | head -n 1 | cut -d' ' -f2))"
