#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a machine with an NVIDIA GPU, a CUDA toolkit, CMake, Ninja and a
# pip PyTorch, but no network and none of torchfarm's Debian packages, build the farm against that
# PyTorch's LibTorch and the .debs of tools/fetch-gpu-debs.sh (unpacked into .gpu-debs/prefix,
# never into /), run the gpu-labelled tests and a short benchmark, and write
# results.md + results.json (+ gpu-check.log, raw/) into $OUT if set, else gpu-results/.
#
#   bash tools/gpu-check.sh                      # from the repository root; about 5-8 minutes
#   GPU_CHECK_REHEARSE=1 bash tools/gpu-check.sh # on a machine without a GPU: see below
#
# Every step prints its name and the elapsed seconds, and a failed step only skips the steps that
# need what it made; the results files are rewritten after every step. Steps:
#   1 report   2 unpack   3 configure   4 build   5 bandwidth   6 gpu tests   7 model
#   8 in-process bench   9-11 farm bench (1 worker; 4 workers without and with MPS)
#
# Settings (environment): GPU_CHECK_SECONDS (8) and GPU_CHECK_WARMUP (3) per measurement,
# GPU_CHECK_BUDGET_S (480: later benchmarks are skipped rather than run past it),
# GPU_CHECK_BUILD_DIR (build-gpu-check), GPU_CHECK_DEBS (.gpu-debs/debs),
# GPU_CHECK_PREFIX (.gpu-debs/prefix), GPU_CHECK_RESULTS, GPU_CHECK_JOBS (nproc),
# GPU_CHECK_UNPACK (auto|dpkg|ar|python), GPU_CHECK_RUNTIME_LIBS (missing: only the prefix
# libraries the machine lacks go on LD_LIBRARY_PATH | all), GPU_CHECK_PKG_CONFIG (auto|prefix),
# GPU_CHECK_PYTHON (python3), GPU_CHECK_STOP_AFTER (a step number: end there, for rehearsals).
#
# Rehearsal (GPU_CHECK_REHEARSE=1): without a pip PyTorch it builds against Debian's LibTorch,
# still with the unpacked prefix; without torchvision it benchmarks torchfarm-mkmodel's convnet
# on the CPU to exercise the plumbing; GPU-only steps report "skipped". Its numbers mean nothing.
# tools/gpu-check-rehearse.sh runs it with the system's copies of the packages hidden.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root" || exit 1

rehearse="${GPU_CHECK_REHEARSE:-0}"
bench_seconds="${GPU_CHECK_SECONDS:-8}"
bench_warmup="${GPU_CHECK_WARMUP:-3}"
budget_s="${GPU_CHECK_BUDGET_S:-480}"
[ "$rehearse" = 1 ] && budget_s="${GPU_CHECK_BUDGET_S:-7200}"
build_dir="$(realpath -m "${GPU_CHECK_BUILD_DIR:-build-gpu-check}")"
debs_dir="$(realpath -m "${GPU_CHECK_DEBS:-.gpu-debs/debs}")"
prefix="$(realpath -m "${GPU_CHECK_PREFIX:-.gpu-debs/prefix}")"
results_dir="$(realpath -m "${GPU_CHECK_RESULTS:-${OUT:-gpu-results}}")"
jobs="${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}"
unpack_with="${GPU_CHECK_UNPACK:-auto}"
runtime_libs_mode="${GPU_CHECK_RUNTIME_LIBS:-missing}"
pkg_config_from="${GPU_CHECK_PKG_CONFIG:-auto}"
python="${GPU_CHECK_PYTHON:-python3}"  # the interpreter with the pip PyTorch
readonly concurrency=64 max_batch=64 farm_streams=2
readonly multiarch=x86_64-linux-gnu

raw="$results_dir/raw"
mkdir -p "$raw" || exit 1
rm -f "$raw"/*.json "$raw"/*.tsv "$raw"/*.txt "$results_dir"/results.{md,json}
exec > >(tee "$results_dir/gpu-check.log") 2>&1
work="$(mktemp -d /tmp/torchfarm-gpu-check.XXXXXX)"  # short: ipc:// paths have a 107-byte limit
start_epoch="$(date +%s)"
supervisor_pid=""
background_pids=()

elapsed() { echo $(($(date +%s) - start_epoch)); }
# shellcheck source=tools/gpu-prefix.sh
. "$repo_root/tools/gpu-prefix.sh"  # unpack_debs, link_runtime_libs
log() { echo "[gpu-check $(printf '%4s' "$(elapsed)")s] $*"; }
env_set() { printf '%s\t%s\n' "$1" "$2" >>"$raw/env.tsv"; }
keep_json() {  # keep_json FILE: FILE.tmp becomes FILE if it holds JSON, even from a failed run
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1.tmp" 2>/dev/null && mv "$1.tmp" "$1"
}
write_results() { python3 "$repo_root/tools/gpu_check_report.py" "$results_dir" || log "report: failed"; }

cleanup() {
  if [ -n "$supervisor_pid" ] && kill -0 "$supervisor_pid" 2>/dev/null; then
    kill -TERM "$supervisor_pid" 2>/dev/null
    sleep 2
    kill -KILL "$supervisor_pid" 2>/dev/null
  fi
  for pid in "${background_pids[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---- step runner -------------------------------------------------------------------------------
# run_step ID TITLE FUNCTION [ESTIMATED_SECONDS]: the function returns 0 (ok), 77 (skipped) or
# anything else (failed) and may set step_note. Steps whose estimate would cross the budget are
# skipped. Each outcome is appended to raw/steps.tsv and the results files are rewritten.
declare -A step_status=()
step_note=""
run_step() {
  local id="$1" title="$2" fn="$3" estimate="${4:-0}" status rc t0
  t0="$(date +%s)"
  step_note=""
  log "=== [$id] $title"
  if [ $(($(elapsed) + estimate)) -gt "$budget_s" ]; then
    rc=77
    step_note="time budget: $(elapsed)s spent + ~${estimate}s would pass ${budget_s}s"
  else
    "$fn"
    rc=$?
  fi
  case "$rc" in
    0) status=ok ;;
    77) status=skipped ;;
    *) status=FAILED ;;
  esac
  step_status["$fn"]="$status"
  local seconds=$(($(date +%s) - t0))
  log "--- [$id] $title: $status in ${seconds}s${step_note:+ ($step_note)}"
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$title" "$status" "$seconds" "${step_note//$'\t'/ }" \
    >>"$raw/steps.tsv"
  write_results
  if [ "$id" = "${GPU_CHECK_STOP_AFTER:-}" ]; then
    log "stopping after step $id (GPU_CHECK_STOP_AFTER)"
    exit 0
  fi
}
needs() {  # needs FUNCTION...: 0 when every named step succeeded; callers return 77 (skipped)
  local fn
  for fn in "$@"; do
    if [ "${step_status[$fn]:-}" != ok ]; then
      step_note="needs step '$fn', which is ${step_status[$fn]:-not run}"
      return 1
    fi
  done
}

# ---- 1. report ---------------------------------------------------------------------------------
has_gpu=0
torch_prefix=""
step_report() {
  env_set date "$(date '+%Y-%m-%d %H:%M %Z')"
  env_set rehearsal "$rehearse"
  env_set host "$(hostname 2>/dev/null)"
  env_set os "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}") $(uname -m)"
  env_set nproc "$(nproc)"
  env_set glibc "$(ldd --version 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+$')"
  log "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(uname -m), $(nproc) cores"
  log "glibc: $(ldd --version 2>/dev/null | head -n 1)"
  local glibc_minor
  glibc_minor="$(ldd --version 2>/dev/null | head -n 1 | grep -oE '2\.[0-9]+$' | cut -d. -f2)"
  if [ -n "$glibc_minor" ] && [ "$glibc_minor" -lt 34 ]; then
    log "WARNING: glibc < 2.34: the Debian 12 libraries of the prefix (libzmq5...) will not load"
  fi
  [ "$(uname -m)" = x86_64 ] || log "WARNING: the .debs are amd64; this machine is $(uname -m)"

  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  if command -v nvcc >/dev/null; then
    export CUDACXX="${CUDACXX:-$(command -v nvcc)}"
    export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$CUDACXX")")")}"
    env_set nvcc "$(nvcc --version | grep -oE 'release [0-9.]+' | cut -d' ' -f2)"
    log "nvcc: $CUDACXX ($(nvcc --version | grep release))"
  else
    log "nvcc: not found (the CUDA language, and torchfarm-gpu-bandwidth, need it)"
  fi

  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    has_gpu=1
    nvidia-smi -L
    local query
    query="$(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total \
      --format=csv,noheader 2>/dev/null | head -n 1)"
    log "gpu 0: $query"
    env_set gpu "$(echo "$query" | cut -d, -f1 | xargs)"
    env_set driver "$(echo "$query" | cut -d, -f2 | xargs)"
    set_cuda_architectures "$(echo "$query" | cut -d, -f3 | xargs)"
    if command -v nvidia-cuda-mps-control >/dev/null; then
      log "MPS: $(command -v nvidia-cuda-mps-control)"
    else
      log "MPS: nvidia-cuda-mps-control not on PATH"
    fi
  else
    log "nvidia-smi: no GPU visible"
  fi

  local torch_info
  if torch_info="$("$python" -c 'import torch, torch.utils
print(torch.__version__)
print(torch.version.cuda)
print(torch.utils.cmake_prefix_path)
print(torch.cuda.is_available() and torch.cuda.get_device_name(0))
print(torch.compiled_with_cxx11_abi())
print("%d.%d" % torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "-")' 2>&1)"; then
    env_set torch "$(sed -n 1p <<<"$torch_info")"
    env_set torch_cuda "$(sed -n 2p <<<"$torch_info")"
    torch_prefix="$(sed -n 3p <<<"$torch_info")"
    log "python3 torch $(sed -n 1p <<<"$torch_info"), CUDA $(sed -n 2p <<<"$torch_info"), device: $(sed -n 4p <<<"$torch_info")"
    log "torch cmake prefix: $torch_prefix; C++11 ABI: $(sed -n 5p <<<"$torch_info") (Debian's .debs need True)"
    if [ "$has_gpu" = 0 ] && [ "$(sed -n 4p <<<"$torch_info")" != False ]; then
      has_gpu=1  # no nvidia-smi in this container, but PyTorch sees the device
      env_set gpu "$(sed -n 4p <<<"$torch_info")"
      set_cuda_architectures "$(sed -n 6p <<<"$torch_info")"
    fi
  elif [ "$rehearse" = 1 ]; then
    log "$python cannot import torch; rehearsal: building against Debian's LibTorch"
    env_set torch "Debian LibTorch $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null)"
  else
    log "$python cannot import torch: $(tail -n 1 <<<"$torch_info")"
    step_note="no pip PyTorch: $python -c 'import torch' failed"
    return 1
  fi
  command -v cmake >/dev/null && log "cmake: $(cmake --version | head -n 1)" || log "cmake: MISSING"
  command -v ninja >/dev/null && log "ninja: $(ninja --version)" || log "ninja: missing (Makefiles)"
  log "c++: $(${CXX:-c++} --version 2>/dev/null | head -n 1)"
  [ "$has_gpu" = 1 ] || env_set gpu none
  [ "$has_gpu" = 1 ] || [ "$rehearse" = 1 ] || { step_note="no GPU visible"; return 1; }
}
set_cuda_architectures() {  # set_cuda_architectures 9.0: build for this GPU only
  if [[ "$1" =~ ^[0-9]+\.[0-9]+$ ]]; then
    export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$1}"
    cuda_architectures="${1/./}"
  fi
}

# ---- 2. unpack ---------------------------------------------------------------------------------
lib_dirs=()
step_unpack() {
  local debs=("$debs_dir"/*.deb)
  if [ ! -e "${debs[0]}" ]; then
    step_note="no .deb files in $debs_dir: run tools/fetch-gpu-debs.sh on a Debian 12 machine and carry .gpu-debs/debs"
    return 1
  fi
  log "$(ls "$debs_dir"/*.deb | wc -l) .deb files, $(du -sh "$debs_dir" | cut -f1) in $debs_dir"
  lib_dirs=("$prefix/usr/lib/$multiarch" "$prefix/lib/$multiarch")
  local stamp fingerprint
  stamp="$prefix/.unpacked"
  fingerprint="$(ls -l "$debs_dir" | cksum | cut -d' ' -f1) $prefix"
  if [ "$unpack_with" = auto ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ]; then
    log "already unpacked into $prefix (same .deb files)"
    return 0
  fi
  local method="$unpack_with"
  if [ "$method" = auto ]; then
    if command -v dpkg-deb >/dev/null; then method="dpkg"
    elif command -v ar >/dev/null && command -v tar >/dev/null && command -v xz >/dev/null; then method="ar"
    else method="python"
    fi
  fi
  log "unpacking with $method into $prefix"
  local failed
  failed="$(unpack_debs "$method" "${debs[@]}")" || { step_note="$failed"; return 1; }
  echo "$fingerprint" >"$stamp"
  log "prefix: $(du -sh "$prefix" | cut -f1), $(find "$prefix" -type f | wc -l) files"
}

# ---- 3. configure ------------------------------------------------------------------------------
generator=()
step_configure() {
  needs step_unpack || return 77
  command -v cmake >/dev/null || { step_note="cmake not found"; return 1; }
  if command -v ninja >/dev/null; then generator=(-G Ninja)
  else generator=(-G "Unix Makefiles"); log "warning: no ninja; using Makefiles"
  fi
  local pkg_config="" args=()
  if [ "$pkg_config_from" = prefix ] || ! pkg-config --version >/dev/null 2>&1; then
    pkg_config="$prefix/bin/pkg-config"
    log "pkg-config: the prefix's pkgconf ($pkg_config)"
  else
    pkg_config="$(command -v pkg-config)"
    log "pkg-config: $pkg_config"
  fi
  # Also for compilers without Debian's multiarch (CMAKE_LIBRARY_ARCHITECTURE empty), which
  # would not look under lib/x86_64-linux-gnu/{cmake,pkgconfig} by themselves.
  export PKG_CONFIG_PATH="$prefix/usr/lib/$multiarch/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  local search="$prefix/usr;$prefix/usr/lib/$multiarch/cmake"
  [ -n "$torch_prefix" ] && search="$torch_prefix;$search"
  local rpath_link
  rpath_link="$(IFS=:; echo "${lib_dirs[*]}")"
  args=(
    -S "$repo_root" -B "$build_dir" "${generator[@]}"
    -DCMAKE_BUILD_TYPE=Release
    -DTORCHFARM_BUILD_TESTS=ON
    "-DCMAKE_PREFIX_PATH=$search"
    "-DCMAKE_LIBRARY_PATH=$prefix/usr/lib/$multiarch;$prefix/lib/$multiarch"
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$rpath_link"
  )
  # Named, or FindPkgConfig would pick the prefix's bare pkgconf (found through
  # CMAKE_PREFIX_PATH), which cannot load its library where the machine lacks libpkgconf3.
  args+=("-DPKG_CONFIG_EXECUTABLE=$pkg_config")
  [ -n "${cuda_architectures:-}" ] && args+=("-DCMAKE_CUDA_ARCHITECTURES=$cuda_architectures")
  [ -n "${CUDACXX:-}" ] && args+=("-DCUDAToolkit_ROOT=$CUDA_HOME")
  if [ "$(cmake --version | head -n 1 | grep -oE '[0-9]+' | head -n 1)" -ge 4 ]; then
    args+=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)  # the .debs' CMake files predate CMake 4
  fi
  log "cmake ${args[*]}"
  cmake "${args[@]}" >"$raw/cmake-configure.txt" 2>&1
  local rc=$?
  grep -E 'CUDA|Torch|torchfarm|warning|Warning|Error|error' "$raw/cmake-configure.txt" | head -n 40
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$raw/cmake-configure.txt"
    step_note="cmake configure failed (raw/cmake-configure.txt)"
    return 1
  fi
  show_dependency_origins
}

# Which file each dependency came from: everything but LibTorch and CUDA must be in the prefix.
show_dependency_origins() {
  local cache="$build_dir/CMakeCache.txt" outside=0 line value
  grep -E '^(ZeroMQ_LIBRARY|ZeroMQ_INCLUDE_DIR|cppzmq_DIR|nlohmann_json_DIR|CLI11_DIR|Boost_DIR|boost_headers_DIR|Boost_INCLUDE_DIR|GTest_DIR|prometheus-cpp_DIR|civetweb_DIR|ZLIB_LIBRARY_RELEASE|ZLIB_INCLUDE_DIR|CURL_LIBRARY_RELEASE|CURL_INCLUDE_DIR|pkgcfg_lib_SYSTEMD_systemd|SYSTEMD_INCLUDEDIR|PKG_CONFIG_EXECUTABLE|Torch_DIR|CUDAToolkit_BIN_DIR|CMAKE_CUDA_COMPILER):' \
    "$cache" | sort >"$raw/cmake-deps.txt"
  log "dependencies as CMake found them (CMakeCache.txt):"
  while IFS= read -r line; do
    value="${line#*=}"
    case "$line" in
      Torch_DIR*|CUDAToolkit*|CMAKE_CUDA*|PKG_CONFIG*) echo "    $line" ;;
      *)
        if [[ "$value" == "$prefix"* ]]; then echo "    prefix  $line"
        else echo "    OUTSIDE $line"; outside=$((outside + 1))
        fi
        ;;
    esac
  done <"$raw/cmake-deps.txt"
  local includes
  includes="$(grep -c -- "$prefix/usr/include" "$build_dir/compile_commands.json" 2>/dev/null)"
  log "compile commands naming $prefix/usr/include: ${includes:-0}"
  if [ "$outside" -gt 0 ]; then
    log "WARNING: $outside dependencies resolved outside the prefix"
    step_note="$outside dependencies outside the prefix"
  fi
}

# ---- 4. build ----------------------------------------------------------------------------------
# Ninja keeps going past a failed target (-k 0), so a compile error in one program leaves the
# steps that need only the others runnable; each step checks its own programs (needs_built).
built_targets=" "
needs_built() {  # needs_built TARGET...: 0 when every named program was built by this run
  local t
  for t in "$@"; do
    if [[ "$built_targets" != *" $t "* ]]; then
      step_note="needs $t, which was not built"
      return 1
    fi
  done
}
target_built() {  # target_built TARGET BUILD_RC: after a failed build, only programs it linked
  [ -x "$build_dir/bin/$1" ] && { [ "$2" -eq 0 ] || [ "$build_dir/bin/$1" -nt "$work/build-start" ]; }
}
step_build() {
  needs step_configure || return 77
  local targets=(torchfarm-supervisor torchfarm-worker torchfarm torchfarm-mkmodel
                 torchfarm-bench-inprocess) available
  available="$(cmake --build "$build_dir" --target help 2>/dev/null)"
  local optional
  for optional in torchfarm-gpu-bandwidth gpu_test; do
    if grep -qE "(^|\.\.\. )$optional(:| |\$)" <<<"$available"; then targets+=("$optional")
    else log "target $optional does not exist in this tree: not built"
    fi
  done
  log "building ${targets[*]} with -j$jobs"
  local t0 rc keep_going=()
  [ "${generator[1]:-}" = Ninja ] && keep_going=(-- -k 0)
  t0="$(date +%s)"
  touch "$work/build-start"
  cmake --build "$build_dir" --target "${targets[@]}" -j "$jobs" "${keep_going[@]}" \
    >"$raw/build.txt" 2>&1
  rc=$?
  env_set build_seconds "$(($(date +%s) - t0))"
  grep -E 'warning:|error:' "$raw/build.txt" | head -n 30
  local t missing=()
  for t in "${targets[@]}"; do
    if target_built "$t" "$rc"; then built_targets+="$t "; else missing+=("$t"); fi
  done
  log "built:${built_targets% }"
  show_system_headers
  [ "$built_targets" != " " ] && resolve_runtime_libs
  if [ "$rc" -ne 0 ]; then
    grep -B2 -A12 '^FAILED:' "$raw/build.txt" | head -n 80
    step_note="NOT built: ${missing[*]:-?} (raw/build.txt)"
    return 1
  fi
}

# Objects that included a system copy of a header the prefix provides (Ninja's dependency log).
show_system_headers() {
  [ "${generator[1]:-}" = Ninja ] || return 0
  local leaks
  leaks="$(ninja -C "$build_dir" -t deps 2>/dev/null | awk '
    /^[^ \t]/ { object = $1; sub(/:$/, "", object) }
    /^[ \t]+\/usr\/include\/(boost|zmq|nlohmann|CLI|systemd|prometheus|gtest|gmock|civetweb|zlib)/ { print object }
  ' | sort | uniq -c)"
  if [ -n "$leaks" ]; then
    log "WARNING: objects that included system copies of the prefix's headers:"
    echo "$leaks"
  else
    log "headers: no object included a system copy of a header the prefix provides"
  fi
}

runtime_ld="${LD_LIBRARY_PATH:-}"  # LD_LIBRARY_PATH for the built programs
tf() { LD_LIBRARY_PATH="$runtime_ld" "$@"; }  # runs one of the built programs
resolve_runtime_libs() {
  local runtime_dir="$prefix/runtime-lib" b
  link_runtime_libs "$runtime_dir" "$runtime_libs_mode" "$build_dir"/bin/*
  ls "$runtime_dir" >"$raw/runtime-libs.txt"
  log "runtime libraries from the prefix ($runtime_libs_mode): $(ls "$runtime_dir" | tr '\n' ' ')"
  runtime_ld="$runtime_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for b in torchfarm-supervisor torchfarm-worker; do
    log "ldd $b: $(tf ldd "$build_dir/bin/$b" 2>&1 | grep -E 'zmq|sodium|prometheus|systemd|civetweb|torch_cuda|cudart|not found' | awk '{print $1 "=" $3}' | tr '\n' ' ')"
  done
}

# ---- 6. gpu tests ------------------------------------------------------------------------------
# The tests may take what the benchmarks after them (about kBenchReserve seconds) leave.
readonly kBenchReserve=200
step_gpu_tests() {
  needs_built gpu_test || return 77
  local limit=$((budget_s - $(elapsed) - kBenchReserve))
  [ "$limit" -gt 180 ] && limit=180
  if [ "$limit" -lt 30 ]; then step_note="time budget: ${limit}s left for tests"; return 77; fi
  log "ctest -L gpu, at most ${limit}s"
  (cd "$build_dir" && tf timeout "$limit" ctest -L gpu --output-on-failure --timeout "$limit") \
    >"$raw/ctest-gpu.txt" 2>&1
  local rc=$?
  cat "$raw/ctest-gpu.txt"
  grep -q 'No tests were found' "$raw/ctest-gpu.txt" && { step_note="no tests labelled gpu"; return 77; }
  step_note="$(grep -E 'tests passed|tests failed' "$raw/ctest-gpu.txt" | head -n 1)"
  if grep -q 'Skipped' "$raw/ctest-gpu.txt"; then
    step_note="$step_note; $(grep -c 'Skipped' "$raw/ctest-gpu.txt") GTEST_SKIP lines"
  fi
  return "$rc"
}

# ---- 7. model ----------------------------------------------------------------------------------
model_name=resnet50
model_file="$work/models/resnet50.pt"
model_shape="1,3,224,224"
model_dims="3, 224, 224"
precision=fp16
farm_device=cuda:0
export_pid=""
start_model_export() {  # in the background, while the build runs
  mkdir -p "$work/models"
  "$python" "$repo_root/tools/export_torchvision.py" --model resnet50 --out "$model_file" \
    --no-freeze --builtin-if-missing >"$raw/export.txt" 2>&1 &
  export_pid=$!
  background_pids+=("$export_pid")
  log "exporting ResNet-50 in the background (pid $export_pid)"
}
step_model() {
  local rc=1
  if [ -n "$export_pid" ]; then
    wait "$export_pid"
    rc=$?
  fi
  cat "$raw/export.txt" 2>/dev/null
  if [ "$rc" -eq 0 ] && [ -s "$model_file" ]; then
    [ "$has_gpu" = 1 ] || { precision=fp32; log "no GPU: benchmarks in fp32 on the CPU"; }
    write_model_tsv "$(sed -nE 's/.*wrote .* \((resnet50, .*)\)$/\1/p' "$raw/export.txt" | head -n 1)"
    return 0
  fi
  if [ "$rehearse" = 1 ] && needs_built torchfarm-mkmodel; then
    model_name=convnet model_file="$work/models/convnet.pt" model_shape="1,3,32,32"
    model_dims="3, 32, 32" precision=fp32
    tf "$build_dir/bin/torchfarm-mkmodel" --model convnet --out "$model_file" || return 1
    write_model_tsv "torchfarm-mkmodel convnet: rehearsal stand-in, CPU, fp32"
    step_note="rehearsal: no torchvision here; convnet stands in, on the CPU in fp32"
    return 0
  fi
  step_note="export_torchvision.py exited $rc (raw/export.txt)"
  return 1
}
write_model_tsv() {
  {
    printf 'name\t%s\nfile\t%s\nsource\t%s\nshape\t%s\n' "$model_name" "$(basename "$model_file")" "$1" "$model_shape"
    printf 'precision\t%s\nconcurrency\t%s\nseconds\t%s\nwarmup\t%s\n' "$precision" "$concurrency" "$bench_seconds" "$bench_warmup"
  } >"$raw/model.tsv"
}

# ---- 8. in-process -----------------------------------------------------------------------------
step_inprocess() {
  needs step_model && needs_built torchfarm-bench-inprocess || return 77
  local device=cuda:0
  [ "$has_gpu" = 1 ] || device=cpu
  local argv=("$build_dir/bin/torchfarm-bench-inprocess" --model "$model_file" --shape "$model_shape"
              --device "$device" --precision "$precision" --batch "1,8,32,64"
              --seconds "$bench_seconds" --warmup "$bench_warmup")
  [ "$device" = cpu ] && argv+=(--threads "$(nproc)")
  log "${argv[*]}"
  tf timeout $((4 * (bench_seconds + bench_warmup) + 90)) "${argv[@]}" >"$raw/inprocess.json.tmp"
  local rc=$?
  cat "$raw/inprocess.json.tmp"
  keep_json "$raw/inprocess.json"
  return "$rc"
}

farm_runs=0
# ---- 9-11. the farm ----------------------------------------------------------------------------
# farm_bench KEY LABEL WORKERS MPS: a supervisor on a generated config, `torchfarm bench` against
# it once every worker is ready, its stats, then SIGTERM.
farm_bench() {
  local key="$1" label="$2" workers="$3" mps="$4"
  needs step_model && needs_built torchfarm-supervisor torchfarm-worker torchfarm || return 77
  local dir="$work/$key" bin="$build_dir/bin"
  mkdir -p "$dir/run"
  local endpoint="ipc://$dir/jobs.sock" admin="ipc://$dir/run/admin.sock"
  printf '%s\t%s\t%s\t%s\n' "$label" "$workers" "$mps" "$farm_runs" >"$raw/farm-$key.tsv"
  farm_runs=$((farm_runs + 1))
  cat >"$dir/farm.json" <<EOF
{
  "endpoint": "$endpoint",
  "admin_endpoint": "$admin",
  "run_dir": "$dir/run",
  "gpu": {"mps": "$mps"},
  "models": [
    {
      "name": "$model_name",
      "path": "$model_file",
      "inputs": [{"dtype": "float32", "shape": [-1, $model_dims]}],
      "instances": [{"device": "$farm_device", "count": $workers, "precision": "$precision",
                     "streams": $farm_streams}],
      "max_batch_size": $max_batch,
      "max_queue_delay_us": 2000,
      "slot_bytes": 50331648,
      "warmup": [1, $max_batch]
    }
  ]
}
EOF
  cp "$dir/farm.json" "$raw/farm-$key-config.json.txt"
  # A simple command, not through tf(): $! must be the supervisor itself, not a subshell.
  LD_LIBRARY_PATH="$runtime_ld" "$bin/torchfarm-supervisor" --config "$dir/farm.json" \
    --drain-timeout-ms 5000 >"$raw/farm-$key-supervisor.txt" 2>&1 &
  supervisor_pid=$!
  local ready=0 deadline=$(($(date +%s) + 120)) health
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if ! kill -0 "$supervisor_pid" 2>/dev/null; then
      tail -n 30 "$raw/farm-$key-supervisor.txt"
      step_note="the supervisor exited during start-up (raw/farm-$key-supervisor.txt)"
      supervisor_pid=""
      return 1
    fi
    health="$(tf "$bin/torchfarm" ctl health --admin "$admin" --json --timeout-ms 1000 2>/dev/null)"
    if python3 -c 'import json,sys; h=json.loads(sys.argv[1]); sys.exit(0 if all(m["ready_workers"] == m["workers"] for m in h["models"]) else 1)' "$health" 2>/dev/null; then
      ready=1
      break
    fi
    sleep 1
  done
  local rc=1
  if [ "$ready" = 1 ]; then
    log "farm ready: $workers workers after $(($(date +%s) - deadline + 120))s"
    local argv=("$bin/torchfarm" bench --endpoint "$endpoint" --model "$model_name"
                --shape "$model_shape" --concurrency "$concurrency" --seconds "$bench_seconds"
                --warmup "$bench_warmup" --json --admin-endpoint "$admin")
    log "${argv[*]}"
    tf timeout $((bench_seconds + bench_warmup + 60)) "${argv[@]}" >"$raw/farm-$key.json.tmp"
    rc=$?
    cat "$raw/farm-$key.json.tmp"
    keep_json "$raw/farm-$key.json"
    tf "$bin/torchfarm" stats --admin "$admin" --json >"$raw/farm-$key-stats.json" 2>/dev/null
    tf "$bin/torchfarm" stats --admin "$admin" 2>/dev/null | tail -n +3
  else
    step_note="workers not all ready within 120s"
    tail -n 30 "$raw/farm-$key-supervisor.txt"
  fi
  stop_supervisor
  grep -E 'level=(warn|error)' "$raw/farm-$key-supervisor.txt" | head -n 10
  return "$rc"
}
stop_supervisor() {
  [ -n "$supervisor_pid" ] || return 0
  kill -TERM "$supervisor_pid" 2>/dev/null
  for _ in $(seq 1 30); do
    kill -0 "$supervisor_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$supervisor_pid" 2>/dev/null; then
    log "supervisor did not stop within 15s of SIGTERM: SIGKILL"
    kill -KILL "$supervisor_pid" 2>/dev/null
  fi
  wait "$supervisor_pid" 2>/dev/null
  log "supervisor exited with status $?"
  supervisor_pid=""
}
step_farm_1() { farm_bench 1w "farm, 1 worker" 1 off; }
step_farm_4() { farm_bench 4w "farm, 4 workers, MPS off" 4 off; }
step_farm_4_mps() { farm_bench 4w-mps "farm, 4 workers, MPS auto" 4 auto; }

# ---- 5. bandwidth -----------------------------------------------------------------------------
step_bandwidth() {
  needs_built torchfarm-gpu-bandwidth || return 77
  local bin="$build_dir/bin/torchfarm-gpu-bandwidth"
  tf timeout 60 "$bin" --mib 256 --iterations 10 >"$raw/bandwidth.json"
  local rc=$?
  cat "$raw/bandwidth.json"
  if [ "$rc" -eq 3 ] && [ "$has_gpu" = 0 ]; then step_note="no CUDA device (expected here)"; return 77; fi
  return "$rc"
}

# ---- main --------------------------------------------------------------------------------------
log "torchfarm GPU check: results in $results_dir, build in $build_dir, budget ${budget_s}s$([ "$rehearse" = 1 ] && echo ', REHEARSAL')"
run_step 1 "report: GPU, CUDA, PyTorch, glibc" step_report
run_step 2 "unpack the .debs into the prefix" step_unpack
[ "${step_status[step_report]}" = ok ] && start_model_export
run_step 3 "configure (CMake)" step_configure
run_step 4 "build the needed targets" step_build
if [ "$has_gpu" = 1 ] || [ "$rehearse" = 1 ]; then
  run_step 5 "H2D bandwidth: pageable vs cudaHostRegister vs cudaMallocHost" step_bandwidth 20
  run_step 6 "ctest -L gpu" step_gpu_tests 30
  run_step 7 "model: ResNet-50 TorchScript, random weights" step_model 30
  run_step 8 "in-process forward loop, batch 1,8,32,64" step_inprocess $((4 * (bench_seconds + bench_warmup) + 20))
  run_step 9 "farm: 1 worker" step_farm_1 $((bench_seconds + bench_warmup + 25))
  run_step 10 "farm: 4 workers, MPS off" step_farm_4 $((bench_seconds + bench_warmup + 30))
  run_step 11 "farm: 4 workers, MPS auto" step_farm_4_mps $((bench_seconds + bench_warmup + 30))
else
  log "no GPU visible: the tests and benchmarks (steps 5-11) are not run"
fi
write_results
log "done in $(elapsed)s"
echo
cat "$results_dir/results.md"
echo
log "files: $results_dir/results.md, results.json, gpu-check.log, raw/"
failed="$(grep -c $'\tFAILED\t' "$raw/steps.tsv")"
[ "$failed" -eq 0 ]
