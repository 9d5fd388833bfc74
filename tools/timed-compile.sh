#!/usr/bin/env bash
# Compiler and linker launcher that logs how long each step took, for finding where a build goes
# (docs/benchmarks.md, "Developer loop"):
#
#   export CCACHE_DISABLE=1 TORCHFARM_TIMING_LOG=/tmp/times.log
#   cmake -S . -B build-timed -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/tools/timed-compile.sh \
#     -DCMAKE_CXX_LINKER_LAUNCHER=$PWD/tools/timed-compile.sh
#   cmake --build build-timed -j 2
#   awk '{print $2 + $3, $4}' /tmp/times.log | sort -rn | head -20   # costliest steps, CPU seconds
#
# Each line of the log: "<wall s> <user s> <sys s> <output file>" (/usr/bin/time). CPU seconds
# (user + sys) stay meaningful on a loaded machine; wall seconds do not.
log="${TORCHFARM_TIMING_LOG:-/tmp/torchfarm-build-times.log}"
out=""
prev=""
for arg in "$@"; do
  [ "$prev" = "-o" ] && out="$arg"
  prev="$arg"
done
exec /usr/bin/time -a -o "$log" -f "%e %U %S ${out//%/%%}" "$@"
