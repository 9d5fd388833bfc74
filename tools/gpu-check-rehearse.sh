#!/usr/bin/env bash
# Rehearses tools/gpu-check.sh on a Debian 12 machine that has torchfarm's packages installed, and
# proves the build needs only the unpacked .debs: in a private mount namespace (unshare -m, root)
# the system's copies of what the .debs hold are hidden (empty directories and /dev/null mounted
# over them), then `GPU_CHECK_REHEARSE=1 tools/gpu-check.sh` runs there (Debian's CPU LibTorch
# when python3 has no torch). Nothing changes outside the namespace, and everything is visible
# again when it ends. Then it checks what the device tool would return (check_out):
# - $OUT (a fresh temporary folder unless OUT is set) holds exactly results.md, results.json,
#   gpu-check.log and raw.tgz: no folder, each under 16 MiB;
# - results.json lists the steps of `gpu-check.sh --print-plan`, in that order (environment,
#   /dev/shm, unpack, configure, build for the tests, ctest -L gpu, build for the benchmarks,
#   benchmarks, farm runs), each done, skipped with why or FAILED with the error, and
#   results.md names each with its status;
# - the whole script ended within its budget (GPU_CHECK_BUDGET_S, 420 by default).
# Exit status: gpu-check.sh's when the checks pass, else 3.
#
#   GPU_CHECK_BUDGET_S=240 bash tools/gpu-check-rehearse.sh [--keep-objects]  # as root
# Hidden: every header directory or file, CMake package folder, .pc file, link-time .so and .a
# of the .debs; pkg-config itself (so the prefix's pkgconf wrapper is used); and the runtime
# libraries of ZeroMQ, prometheus-cpp, civetweb and pkgconf (so LD_LIBRARY_PATH must supply them
# from the prefix). Not hidden: runtime libraries the machine's own tools load (libsystemd0,
# libssl3, krb5, zlib...). --keep-objects reuses build-gpu-rehearse's object files: its
# CMakeCache.txt and bin/ are removed, so CMake configures from scratch and every program is
# linked again, but nothing is recompiled (the compile commands are unchanged).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debs_dir="$(realpath -m "${GPU_CHECK_DEBS:-$repo_root/.gpu-debs/debs}")"
build_dir="$(realpath -m "${GPU_CHECK_BUILD_DIR:-$repo_root/build-gpu-rehearse}")"
readonly multiarch=x86_64-linux-gnu
# Runtime packages whose libraries are hidden too: nothing outside torchfarm loads them.
hidden_runtime_packages=" libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libprometheus-cpp-core1.0"
hidden_runtime_packages+=" libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 libcivetweb1 libpkgconf3 "
readonly hidden_runtime_packages

if [ "$(id -u)" != 0 ]; then echo "gpu-check-rehearse: needs root (mount namespaces)" >&2; exit 1; fi
if [ "${1:-}" != --inside ]; then
  exec unshare -m --propagation private bash "$0" --inside "$@"
fi
shift
keep_objects=0
[ "${1:-}" = --keep-objects ] && keep_objects=1

# The path to hide for one file of a package: its top folder where a whole folder belongs to
# the package (usr/include/boost, usr/share/cmake/cppzmq), the file itself otherwise; nothing for
# docs, sources and plugin folders.
hide_target() {
  local path="$1" package="$2" lib="usr/lib/$multiarch" name='[^/]+'
  if [[ "$path" =~ ^(usr/include/$multiarch/$name)(/|$) ]]; then echo "${BASH_REMATCH[1]}"
  elif [[ "$path" =~ ^usr/include/$multiarch$ ]]; then :  # glibc's headers live there too
  elif [[ "$path" =~ ^(usr/include/$name)(/|$) ]]; then echo "${BASH_REMATCH[1]}"
  elif [[ "$path" =~ ^(usr/share/cmake/$name)/ || "$path" =~ ^($lib/cmake/$name)/ ]]; then
    echo "${BASH_REMATCH[1]}"
  elif [[ "$path" =~ ^$lib/cmake/$name\.cmake$ ]]; then echo "$path"
  elif [[ "$path" =~ ^($lib|usr/share)/pkgconfig/$name\.pc$ ]]; then echo "$path"
  elif [[ "$path" =~ ^$lib/$name\.(so|a)$ ]]; then echo "$path"
  elif [[ "$path" =~ ^(usr/)?lib/$multiarch/$name\.so\. ]]; then
    [[ "$hidden_runtime_packages" == *" $package "* ]] && echo "$path"
  fi
  return 0
}

targets_file="$(mktemp)"
for deb in "$debs_dir"/*.deb; do
  package="$(dpkg-deb -f "$deb" Package)"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./||; s|/$||' | while read -r path; do
    [ -n "$path" ] && hide_target "$path" "$package"
  done
done | sort -u >"$targets_file"
printf '%s\n' usr/bin/pkg-config usr/bin/pkgconf "usr/bin/$multiarch-pkg-config" >>"$targets_file"

empty_dir="$(mktemp -d)"
hidden=0
skipped=()
while read -r path; do
  target="/$path"
  [ -e "$target" ] || continue
  # A mount over a symlink lands on its target: hide a link only when its target is hidden too
  # (libzmq.so, not libz.so, whose target every program on the machine loads).
  if [ -L "$target" ] && ! grep -qxF "$(realpath --relative-to=/ "$target")" "$targets_file"; then
    skipped+=("$path")
    continue
  fi
  if [ -d "$target" ]; then mount --bind "$empty_dir" "$target"
  else mount --bind /dev/null "$target"
  fi
  hidden=$((hidden + 1))
done <"$targets_file"
echo "gpu-check-rehearse: hid $hidden system paths (of $(wc -l <"$targets_file") the .debs provide)"
echo "gpu-check-rehearse: left visible (links to libraries the machine runs on): ${skipped[*]}"
for probe in /usr/include/zmq.hpp /usr/include/boost/version.hpp /usr/include/nlohmann/json.hpp \
             /usr/share/cmake/cppzmq/cppzmqConfig.cmake /usr/lib/$multiarch/libzmq.so.5; do
  if [ -s "$probe" ]; then echo "gpu-check-rehearse: $probe is still visible" >&2; exit 1; fi
done
if pkg-config --version >/dev/null 2>&1; then echo "gpu-check-rehearse: pkg-config still runs" >&2; exit 1; fi
echo "gpu-check-rehearse: zmq.hpp, boost, nlohmann, cppzmq's CMake files, libzmq.so.5, pkg-config: hidden"

if [ "$keep_objects" = 1 ]; then
  rm -rf "${build_dir:?}/CMakeCache.txt" "${build_dir:?}/CMakeFiles/"*.cmake "${build_dir:?}/bin"
  echo "gpu-check-rehearse: reusing the objects in $build_dir; configuring and linking again"
fi
cd "$repo_root"
out_dir="${OUT:-$(mktemp -d /tmp/gpu-check-out.XXXXXX)}"
budget_s="${GPU_CHECK_BUDGET_S:-420}"
t0="$(date +%s.%N)"
set +e
OUT="$out_dir" GPU_CHECK_RESULTS="$out_dir" GPU_CHECK_BUDGET_S="$budget_s" GPU_CHECK_REHEARSE=1 \
  GPU_CHECK_BUILD_DIR="$build_dir" bash tools/gpu-check.sh
check_rc=$?
set -e
wall="$(echo "$(date +%s.%N) - $t0" | bc)"
echo
echo "gpu-check-rehearse: gpu-check.sh exited $check_rc after ${wall}s (budget ${budget_s}s)"
echo "gpu-check-rehearse: \$OUT = $out_dir:"
(cd "$out_dir" && find . -mindepth 1 -printf '  %P  %s bytes\n' | sort)

# What the device tool would bring back, read against its limits and the plan.
check_out() {
  local plan_file
  plan_file="$(mktemp)"
  bash tools/gpu-check.sh --print-plan >"$plan_file"
  python3 - "$out_dir" "$wall" "$budget_s" "$plan_file" "${GPU_CHECK_STOP_AFTER:-}" <<'PY'
import json, os, sys, tarfile
out, wall, budget, plan_file, stop_after = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
plan = [line.rstrip("\n").split("\t") for line in open(plan_file) if line.strip()]
problems = []
expected = {"results.md", "results.json", "gpu-check.log", "raw.tgz"}
entries = set(os.listdir(out))
if entries != expected:
    problems.append(f"$OUT holds {sorted(entries)}, want exactly {sorted(expected)}")
for name in entries & expected:
    size = os.path.getsize(os.path.join(out, name))
    if size > 16 << 20:
        problems.append(f"{name}: {size} bytes, over the 16 MiB a returned file may have")
doc = json.load(open(os.path.join(out, "results.json")))
ids = [s["id"] for s in doc["steps"]]
if ids != [p[0] for p in plan]:
    problems.append(f"steps {ids}, want the plan's order {[p[0] for p in plan]}")
md = open(os.path.join(out, "results.md")).read()
for s in doc["steps"]:
    where = f"step {s['id']} ({s['title']})"
    if s["status"] not in ("done", "skipped", "FAILED"):
        if not (stop_after and s["status"] == "not run"):
            problems.append(f"{where}: status {s['status']!r}")
    if s["status"] in ("skipped", "FAILED", "not run") and not s["note"].strip():
        problems.append(f"{where}: {s['status']} without a reason")
    if f"| {s['id']} {s['title']} | {s['status']} |" not in md:
        problems.append(f"{where}: not in results.md with its status")
with tarfile.open(os.path.join(out, "raw.tgz")) as tar:
    if "raw/steps.tsv" not in tar.getnames():
        problems.append("raw.tgz has no raw/steps.tsv")
if wall > budget:
    problems.append(f"the check took {wall:.0f} s, over its budget of {budget} s")
for s in doc["steps"]:
    print(f"  {s['id']:>2} {s['status']:<8} {s['title']}: {s['note'][:110]}")
for p in problems:
    print(f"gpu-check-rehearse: PROBLEM: {p}")
sys.exit(1 if problems else 0)
PY
}
if check_out; then
  echo "gpu-check-rehearse: PASS: 4 files, every step accounted for, ${wall}s of ${budget_s}s"
  exit "$check_rc"
fi
echo "gpu-check-rehearse: FAIL (see the PROBLEM lines)"
exit 3
