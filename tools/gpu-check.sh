#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a machine with an NVIDIA GPU, a CUDA toolkit, CMake, Ninja and a
# pip PyTorch, but no network and none of torchfarm's Debian packages, build the farm against that
# PyTorch's LibTorch and the .debs of tools/fetch-gpu-debs.sh (unpacked into .gpu-debs/prefix,
# never into /), run the gpu-labelled tests and short benchmarks, all inside one time budget.
#
#   bash tools/gpu-check.sh                      # from the repository root; at most 420 s
#   GPU_CHECK_REHEARSE=1 bash tools/gpu-check.sh # on a machine without a GPU: see below
#   bash tools/gpu-check.sh --print-plan         # the steps (id, title), nothing run
#
# Made for one device-tool call (`run(..., timeout_s=600)`), which returns at most 8 files from
# $OUT: $OUT (else gpu-results/) receives exactly 4, rewritten after every step so a run cut
# short still returns them: results.md, results.json, gpu-check.log (teed live) and raw.tgz (the
# raw outputs). Everything else stays in the work folder (GPU_CHECK_WORK, default
# <build dir>/gpu-check-work). Steps, most valuable first (the plan table below):
#   1 environment (stops the check on a pre-C++11-ABI PyTorch)  2 /dev/shm  3 unpack
#   4 configure (one retry with the CUDA::nvtx3 fallback)  5 build gpu_test  6 ctest -L gpu (90 s)
#   7 build the benchmark programs  8 bandwidth  9 model  10 in-process  11-13 farm
# A failed step skips only the steps that need what it made; a step that the time left cannot
# hold is skipped and says so; every command runs under `timeout` capped at the time left.
#
# Settings (environment): GPU_CHECK_BUDGET_S (420: the whole script ends within it),
# GPU_CHECK_SECONDS (5) and GPU_CHECK_WARMUP (2) per measurement, GPU_CHECK_BUILD_DIR
# (build-gpu-check), GPU_CHECK_WORK, GPU_CHECK_DEBS (.gpu-debs/debs), GPU_CHECK_PREFIX
# (.gpu-debs/prefix), GPU_CHECK_RESULTS (else $OUT, else gpu-results), GPU_CHECK_JOBS (nproc),
# GPU_CHECK_UNPACK (auto|dpkg|ar|python), GPU_CHECK_RUNTIME_LIBS (missing: only the prefix
# libraries the machine lacks go on LD_LIBRARY_PATH | all), GPU_CHECK_PKG_CONFIG (auto|prefix),
# GPU_CHECK_PYTHON (python3), GPU_CHECK_STOP_AFTER (a step id: end there, for rehearsals),
# GPU_CHECK_SHM_MIB (pretend /dev/shm has this many MiB free: tests the shrinking).
#
# Rehearsal (GPU_CHECK_REHEARSE=1): without a pip PyTorch it builds against Debian's LibTorch,
# still with the unpacked prefix, and benchmarks torchfarm-mkmodel's convnet on the CPU to
# exercise the plumbing; GPU-only steps report "skipped". Its numbers mean nothing.
# tools/gpu-check-rehearse.sh runs it with the system's copies of the packages hidden and checks
# what comes back.
set -uo pipefail
umask 077  # the run folders: run_dir_lock refuses a group- or other-writable run_dir

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root" || exit 1

# ---- the plan: id | title | function | seconds the step needs at least ------------------------
bench_seconds="${GPU_CHECK_SECONDS:-5}"
bench_warmup="${GPU_CHECK_WARMUP:-2}"
readonly kFarmStepS=$((bench_seconds + bench_warmup + 25))
readonly plan=(
  "1|environment: GPU, driver, CUDA, PyTorch and its C++ ABI, glibc, /dev/shm|step_env|0"
  "2|/dev/shm: room for the farm's ring segments|step_shm|0"
  "3|unpack the .debs into the prefix|step_unpack|10"
  "4|configure (CMake; one retry with the CUDA::nvtx3 fallback)|step_configure|15"
  "5|build what ctest -L gpu needs|step_build_tests|20"
  "6|ctest -L gpu (at most 90 s)|step_gpu_tests|15"
  "7|build the benchmark programs|step_build_bench|15"
  "8|H2D bandwidth: pageable vs cudaHostRegister vs cudaMallocHost|step_bandwidth|10"
  "9|model: ResNet-50 TorchScript, random weights|step_model|5"
  "10|in-process forward loop, batch 1 and 64|step_inprocess|$((2 * (bench_seconds + bench_warmup) + 10))"
  "11|farm: 1 worker|step_farm_1|$kFarmStepS"
  "12|farm: 4 workers, MPS off|step_farm_4|$kFarmStepS"
  "13|farm: 4 workers, MPS auto|step_farm_4_mps|$kFarmStepS"
)
if [ "${1:-}" = --print-plan ]; then
  for row in "${plan[@]}"; do IFS='|' read -r id title _ _ <<<"$row"; printf '%s\t%s\n' "$id" "$title"; done
  exit 0
fi

# ---- settings ------------------------------------------------------------------------------------
rehearse="${GPU_CHECK_REHEARSE:-0}"
budget_s="${GPU_CHECK_BUDGET_S:-420}"
build_dir="$(realpath -m "${GPU_CHECK_BUILD_DIR:-build-gpu-check}")"
work_dir="$(realpath -m "${GPU_CHECK_WORK:-$build_dir/gpu-check-work}")"
debs_dir="$(realpath -m "${GPU_CHECK_DEBS:-.gpu-debs/debs}")"
prefix="$(realpath -m "${GPU_CHECK_PREFIX:-.gpu-debs/prefix}")"
results_dir="$(realpath -m "${GPU_CHECK_RESULTS:-${OUT:-gpu-results}}")"
jobs="${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}"
unpack_with="${GPU_CHECK_UNPACK:-auto}"
runtime_libs_mode="${GPU_CHECK_RUNTIME_LIBS:-missing}"
pkg_config_from="${GPU_CHECK_PKG_CONFIG:-auto}"
python="${GPU_CHECK_PYTHON:-python3}"  # the interpreter with the pip PyTorch
readonly multiarch=x86_64-linux-gnu
readonly kFinishReserveS=8   # the last report and raw.tgz after the last step
readonly kCtestCapS=90       # ctest -L gpu, fixed: the only correctness check of the CUDA code
readonly kMaxTarBytes=$((15 * 1024 * 1024))  # the device tool returns files up to 16 MiB
[[ "$budget_s" =~ ^[0-9]+$ ]] && [ "$budget_s" -ge 30 ] || { echo "GPU_CHECK_BUDGET_S: want >= 30, got '$budget_s'" >&2; exit 2; }

raw="$work_dir/raw"
mkdir -p "$results_dir" "$work_dir" || exit 1
rm -rf "$raw"
mkdir -p "$raw" || exit 1
rm -f "$results_dir"/{results.md,results.json,gpu-check.log,raw.tgz}
exec > >(tee "$results_dir/gpu-check.log") 2>&1
work="$(mktemp -d /tmp/torchfarm-gpu-check.XXXXXX)"  # short: ipc:// paths have a 107-byte limit
start_epoch="$(date +%s)"
deadline_epoch=$((start_epoch + budget_s))
supervisor_pid=""
background_pids=()

elapsed() { echo $(($(date +%s) - start_epoch)); }
left() { echo $((deadline_epoch - kFinishReserveS - $(date +%s))); }  # seconds a step may still use
capped() {  # capped N: N, or the time left when that is less (at least 1)
  local l
  l="$(left)"
  if [ "$l" -ge "$1" ]; then echo "$1"
  elif [ "$l" -ge 1 ]; then echo "$l"
  else echo 1
  fi
}
# shellcheck source=tools/gpu-prefix.sh
. "$repo_root/tools/gpu-prefix.sh"  # unpack_debs, link_runtime_libs
log() { echo "[gpu-check $(printf '%4s' "$(elapsed)")s] $*"; }
env_set() { printf '%s\t%s\n' "$1" "${2//$'\t'/ }" >>"$raw/env.tsv"; }
keep_json() {  # keep_json FILE: FILE.tmp becomes FILE if it holds JSON, even from a failed run
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1.tmp" 2>/dev/null && mv "$1.tmp" "$1"
}
first_error() {  # first_error FILE: the first line that reads like an error, for a step's note
  grep -m 1 -E 'CMake Error|error:|Error:|FAILED|fatal|No such file' "$1" 2>/dev/null | cut -c 1-200
}

# results.md + results.json (from raw/) and raw.tgz into the results folder, each replaced whole.
write_report() { python3 "$repo_root/tools/gpu_check_report.py" "$raw" "$results_dir" || log "report: failed"; }
write_results() {
  write_report
  local tmp="$results_dir/raw.tgz.tmp"
  tar -czf "$tmp" -C "$work_dir" raw 2>/dev/null
  if [ "$(stat -c %s "$tmp" 2>/dev/null || echo 0)" -gt "$kMaxTarBytes" ]; then
    # Too big to come back: the files over 1 MiB go in as their last 2000 lines.
    local trimmed="$work_dir/raw-trimmed" f
    rm -rf "$trimmed" && cp -r "$raw" "$trimmed"
    find "$trimmed" -type f -size +1M | while read -r f; do tail -n 2000 "$f" >"$f.tail" && mv "$f.tail" "$f"; done
    tar -czf "$tmp" -C "$work_dir" --transform 's,^raw-trimmed,raw,' raw-trimmed 2>/dev/null
  fi
  mv -f "$tmp" "$results_dir/raw.tgz"
}

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
on_signal() {
  log "interrupted (signal) during step ${current_step:-none}"
  if [ -n "${current_step:-}" ]; then
    printf '%s\t%s\t%s\t%s\t%s\n' "$current_step" "$current_title" FAILED \
      $(($(date +%s) - current_t0)) "interrupted: the check was stopped during this step" >>"$raw/steps.tsv"
    rm -f "$raw/current.tsv"
  fi
  write_results
  exit 130
}
trap on_signal INT TERM

# ---- step runner -------------------------------------------------------------------------------
# A step's function returns 0 (done), 77 (skipped) or anything else (failed) and sets step_note
# (why it was skipped, the error it failed with). raw/plan.tsv holds every step, raw/current.tsv
# the one running, raw/steps.tsv each outcome: the report can tell "not reached" from "was running".
declare -A step_status=()
step_note=""
stop_reason=""  # set by a step after which nothing else can run
current_step="" current_title="" current_t0=0
run_step() {
  local id="$1" title="$2" fn="$3" needs_s="$4" status rc ran=0
  current_step="$id" current_title="$title" current_t0="$(date +%s)"
  step_note=""
  printf '%s\t%s\n' "$id" "$title" >"$raw/current.tsv"
  log "=== [$id] $title ($(left)s left)"
  if [ -n "$stop_reason" ]; then
    rc=77 step_note="stopped early: $stop_reason"
  elif [ "$(left)" -lt "$needs_s" ]; then
    local spare
    spare="$(left)"
    [ "$spare" -ge 0 ] || spare=0
    rc=77 step_note="time budget: ${spare}s left of ${budget_s}s, the step needs ~${needs_s}s"
  else
    write_report  # says "running step N" should the check be killed during it
    "$fn"
    rc=$?
    ran=1
  fi
  case "$rc" in
    0) status="done" ;;
    77) status=skipped ;;
    *) status=FAILED; [ -n "$step_note" ] || step_note="exit status $rc (gpu-check.log)" ;;
  esac
  step_status["$fn"]="$status"
  local seconds=$(($(date +%s) - current_t0))
  log "--- [$id] $title: $status in ${seconds}s${step_note:+ ($step_note)}"
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$title" "$status" "$seconds" "${step_note//$'\t'/ }" \
    >>"$raw/steps.tsv"
  rm -f "$raw/current.tsv"
  current_step=""
  # A step skipped without running changed nothing but steps.tsv: the next write covers it
  # (each write costs about a second, which the last steps of a spent budget do not have).
  [ "$ran" = 1 ] && write_results
  if [ "$id" = "${GPU_CHECK_STOP_AFTER:-}" ]; then
    log "stopping after step $id (GPU_CHECK_STOP_AFTER)"
    [ "$ran" = 1 ] || write_results
    exit 0
  fi
}
needs() {  # needs FUNCTION...: 0 when every named step is done; callers return 77 (skipped)
  local fn
  for fn in "$@"; do
    if [ "${step_status[$fn]:-}" != "done" ]; then
      step_note="needs step '$fn', which is ${step_status[$fn]:-not run}"
      return 1
    fi
  done
}

# shellcheck source=tools/gpu-check-env.sh
. "$repo_root/tools/gpu-check-env.sh"    # step_env, step_shm
# shellcheck source=tools/gpu-check-build.sh
. "$repo_root/tools/gpu-check-build.sh"  # step_unpack, step_configure, step_build_*, step_gpu_tests
# shellcheck source=tools/gpu-check-bench.sh
. "$repo_root/tools/gpu-check-bench.sh"  # step_bandwidth, step_model, step_inprocess, step_farm_*

# ---- main --------------------------------------------------------------------------------------
for row in "${plan[@]}"; do IFS='|' read -r id title _ _ <<<"$row"; printf '%s\t%s\n' "$id" "$title"; done >"$raw/plan.tsv"
env_set budget_s "$budget_s"
log "torchfarm GPU check: results in $results_dir, work in $work_dir, build in $build_dir, budget ${budget_s}s$([ "$rehearse" = 1 ] && echo ', REHEARSAL')"
# Whatever hangs, the results are written once the budget is spent: the TERM trap reports the
# step that was running (every command also runs under a timeout capped at the time left).
(trap 'kill "$sleep_pid" 2>/dev/null; exit 0' TERM
 sleep "$budget_s" & sleep_pid=$!
 wait "$sleep_pid" && kill -TERM $$ 2>/dev/null) &
watchdog_pid=$!
background_pids+=("$watchdog_pid")
for row in "${plan[@]}"; do
  IFS='|' read -r id title fn needs_s <<<"$row"
  run_step "$id" "$title" "$fn" "$needs_s"
  [ "$fn" = step_env ] && [ "${step_status[step_env]}" = "done" ] && start_model_export
done
write_results
log "done in $(elapsed)s of ${budget_s}s"
echo
cat "$results_dir/results.md"
echo
log "files in $results_dir: $(cd "$results_dir" && ls | tr '\n' ' ')"
! grep -q $'\tFAILED\t' "$raw/steps.tsv"
