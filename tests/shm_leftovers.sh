#!/usr/bin/env bash
# The suite leaves /dev/shm as it found it (tests/CMakeLists.txt, fixture torchfarm_shm).
#   shm_leftovers.sh record FILE   before the first test: the torchfarm-* names already there
#   shm_leftovers.sh check FILE    after the last test: fails on a name not in FILE, printing it
#                                  and its owner (the supervisor pid in "torchfarm-<pid>-…")
# A new segment counts against the suite when its owner is dead (nobody will remove it until the
# next supervisor starts) or alive with TORCHFARM_TEST_SUITE in its environment (a supervisor a
# test started and never stopped). A farm of the user's own, running during the suite, is
# reported and ignored; one SIGKILLed during the suite cannot be told apart from the suite's.
set -euo pipefail
mode=${1:?record|check}
list=${2:?file}

names() { find /dev/shm -maxdepth 1 -name 'torchfarm-*' -printf '%f\n' 2>/dev/null | sort; }

case "$mode" in
  record)
    names > "$list"
    echo "torchfarm segments in /dev/shm before the suite: $(wc -l < "$list")"
    ;;
  check)
    [[ -f "$list" ]] || { echo "no record $list: run the suite through ctest"; exit 1; }
    leftovers=0
    while read -r name; do
      [[ -n "$name" ]] || continue
      pid=${name#torchfarm-}
      pid=${pid%%-*}
      if [[ ! -d /proc/$pid ]]; then
        echo "LEFT: /dev/shm/$name (owner pid $pid, dead)"
        leftovers=$((leftovers + 1))
      elif tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -q '^TORCHFARM_TEST_SUITE='; then
        echo "LEFT: /dev/shm/$name (owner pid $pid, a supervisor of the suite still running:" \
             "$(tr '\0' ' ' < "/proc/$pid/cmdline"))"
        leftovers=$((leftovers + 1))
      else
        echo "ignored: /dev/shm/$name (owner pid $pid, alive, not started by the suite)"
      fi
    done < <(comm -13 "$list" <(names))
    if ((leftovers > 0)); then
      echo "$leftovers torchfarm segment(s) created during the suite are still in /dev/shm:" \
           "the test that started the supervisor must remove them (RemoveStaleFiles)"
      exit 1
    fi
    echo "no torchfarm segment left in /dev/shm by the suite"
    ;;
  *)
    echo "usage: $0 record|check FILE" >&2
    exit 2
    ;;
esac
