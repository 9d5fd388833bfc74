#!/usr/bin/env bash
# Fails when the C++ lines a change touched differ from what clang-format (.clang-format) makes of
# them, and prints the diff that would fix them. Only changed lines are checked (clang-format-diff),
# so a change is held to the format without reformatting the files around it.
#
#   tools/check-format.sh            lines changed since the base: TORCHFARM_FORMAT_BASE, else the
#                                    merge base with origin/main when HEAD is not on it, else HEAD~1
#                                    (a clean clone of main: its last commit), plus uncommitted ones
#   tools/check-format.sh --fix      rewrites those lines in place instead
set -euo pipefail
cd "$(dirname "$0")/.."

formatter=""
for candidate in clang-format-diff-14 clang-format-diff; do
  if command -v "$candidate" > /dev/null; then formatter="$candidate"; break; fi
done
if [ -z "$formatter" ]; then
  echo "check-format: clang-format-diff not found (tools/install-deps.sh installs clang-format-14)" >&2
  exit 2
fi
binary="clang-format"
command -v clang-format-14 > /dev/null && binary="clang-format-14"

base="${TORCHFARM_FORMAT_BASE:-}"
if [ -z "$base" ]; then
  if git rev-parse -q --verify origin/main > /dev/null &&
     [ "$(git rev-parse origin/main)" != "$(git rev-parse HEAD)" ]; then
    base="$(git merge-base HEAD origin/main)"
  elif git rev-parse -q --verify HEAD~1 > /dev/null; then
    base="HEAD~1"
  else
    echo "check-format: no base commit to compare with; nothing checked"
    exit 0
  fi
fi

mode=()
[ "${1:-}" = "--fix" ] && mode=(-i)
# Generated and third-party files are not ours to format.
diff_output="$(git diff -U0 --no-color -M "$base" -- '*.cc' '*.h' ':!proto/generated/*' |
               "$formatter" -p1 -binary "$binary" "${mode[@]}")" || true
if [ -n "$diff_output" ] && [ ${#mode[@]} -eq 0 ]; then
  printf '%s\n' "$diff_output"
  echo "check-format: the lines above differ from .clang-format (base $base);" \
       "tools/check-format.sh --fix rewrites them" >&2
  exit 1
fi
echo "check-format: changed C++ lines since $base follow .clang-format"
