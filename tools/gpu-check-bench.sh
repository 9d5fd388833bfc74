# shellcheck shell=bash disable=SC2154  # raw, build_dir, work, model_*...: globals of tools/gpu-check.sh
# Steps 8-13 of tools/gpu-check.sh (sourced by it, not run): short measurements, each command
# under a timeout capped at the time left of the budget.
#
#   step_bandwidth   torchfarm-gpu-bandwidth: pageable vs cudaHostRegister vs cudaMallocHost
#   step_model       the ResNet-50 export started in the background after step 1 (convnet from
#                    torchfarm-mkmodel in a rehearsal without PyTorch)
#   step_inprocess   torchfarm-bench-inprocess, batch 1 and 64
#   step_farm_*      a supervisor on a generated config, `torchfarm bench` once every worker is
#                    ready; after one farm failed to get ready the later ones are skipped

readonly concurrency=64 farm_streams=2

# ---- 8. bandwidth ------------------------------------------------------------------------------
step_bandwidth() {
  needs_built torchfarm-gpu-bandwidth || return 77
  tf timeout -k 5 "$(capped 60)" "$build_dir/bin/torchfarm-gpu-bandwidth" --mib 256 --iterations 10 \
    >"$raw/bandwidth.json"
  local rc=$?
  cat "$raw/bandwidth.json"
  if [ "$rc" -eq 3 ] && [ "$has_gpu" = 0 ]; then step_note="no CUDA device (expected here)"; return 77; fi
  [ "$rc" -eq 0 ] || step_note="torchfarm-gpu-bandwidth exited $rc: $(grep -o '"error": *"[^"]*"' "$raw/bandwidth.json" | head -n 1)"
  return "$rc"
}

# ---- 9. model ----------------------------------------------------------------------------------
model_file="$work/models/$model_name.pt"
export_pid=""
start_model_export() {  # in the background, while CMake and the build run
  [ "$model_name" = resnet50 ] || return 0
  mkdir -p "$work/models"
  model_file="$work/models/resnet50.pt"
  timeout -k 5 "$(capped 300)" "$python" "$repo_root/tools/export_torchvision.py" --model resnet50 \
    --out "$model_file" --no-freeze --builtin-if-missing >"$raw/export.txt" 2>&1 &
  export_pid=$!
  background_pids+=("$export_pid")
  log "exporting ResNet-50 in the background (pid $export_pid)"
}
step_model() {
  if [ "$model_name" = convnet ]; then
    needs_built torchfarm-mkmodel || return 77
    model_file="$work/models/convnet.pt"
    mkdir -p "$work/models"
    tf timeout -k 5 "$(capped 60)" "$build_dir/bin/torchfarm-mkmodel" --model convnet --out "$model_file" \
      >"$raw/export.txt" 2>&1 || { step_note="torchfarm-mkmodel failed: $(tail -n 1 "$raw/export.txt")"; return 1; }
    write_model_tsv "torchfarm-mkmodel convnet: rehearsal stand-in, CPU, fp32"
    step_note="rehearsal: no PyTorch here; convnet stands in, on the CPU in fp32"
    return 0
  fi
  [ -n "$export_pid" ] || { step_note="the export was never started (step 1 did not finish)"; return 1; }
  local rc
  # The export had the build's time; what is left of the budget caps the rest of the wait.
  timeout "$(capped 120)" tail --pid="$export_pid" -f /dev/null
  wait "$export_pid"
  rc=$?
  cat "$raw/export.txt" 2>/dev/null
  if [ "$rc" -eq 0 ] && [ -s "$model_file" ]; then
    write_model_tsv "$(sed -nE 's/.*wrote .* \((resnet50, .*)\)$/\1/p' "$raw/export.txt" | head -n 1)"
    return 0
  fi
  step_note="export_torchvision.py exited $rc: $(tail -n 1 "$raw/export.txt" 2>/dev/null | cut -c 1-160)"
  return 1
}
write_model_tsv() {
  {
    printf 'name\t%s\nfile\t%s\nsource\t%s\nshape\t%s\n' "$model_name" "$(basename "$model_file")" "$1" "$model_shape"
    printf 'precision\t%s\nconcurrency\t%s\nseconds\t%s\nwarmup\t%s\n' "$precision" "$concurrency" "$bench_seconds" "$bench_warmup"
  } >"$raw/model.tsv"
}

# ---- 10. in-process ----------------------------------------------------------------------------
step_inprocess() {
  needs step_model && needs_built torchfarm-bench-inprocess || return 77
  local device=cuda:0
  [ "$has_gpu" = 1 ] || device=cpu
  local argv=("$build_dir/bin/torchfarm-bench-inprocess" --model "$model_file" --shape "$model_shape"
              --device "$device" --precision "$precision" --batch "1,64"
              --seconds "$bench_seconds" --warmup "$bench_warmup")
  [ "$device" = cpu ] && argv+=(--threads "$(nproc)")
  log "${argv[*]}"
  tf timeout -k 5 "$(capped $((2 * (bench_seconds + bench_warmup) + 60)))" "${argv[@]}" \
    >"$raw/inprocess.json.tmp"
  local rc=$?
  cat "$raw/inprocess.json.tmp"
  keep_json "$raw/inprocess.json"
  if [ "$rc" -eq 124 ]; then step_note="stopped by the time budget"
  elif [ "$rc" -eq 0 ]; then step_note="rows/s and latency: the benchmark table"
  else step_note="torchfarm-bench-inprocess exited $rc"
  fi
  return "$rc"
}

# ---- 11-13. the farm ---------------------------------------------------------------------------
farm_runs=0
farm_not_ready=""  # set when a farm did not get ready: the later ones would not either
# farm_bench KEY LABEL WORKERS MPS: a supervisor on a generated config, `torchfarm bench` against
# it once every worker is ready, its stats, then SIGTERM; all within the time left.
farm_bench() {
  local key="$1" label="$2" workers="$3" mps="$4"
  needs step_model && needs step_shm && needs_built torchfarm-supervisor torchfarm-worker torchfarm || return 77
  if [ -n "$farm_not_ready" ]; then step_note="skipped: $farm_not_ready"; return 77; fi
  if [ "$workers" -gt "$farm_workers" ]; then
    label="$label (shrunk to $farm_workers: /dev/shm)"
    workers="$farm_workers"
  fi
  local dir="$work/$key" bin="$build_dir/bin" step_end=$(($(date +%s) + $(left)))
  mkdir -p "$dir/run"
  local endpoint="ipc://$dir/jobs.sock" admin="ipc://$dir/run/admin.sock"
  printf '%s\t%s\t%s\t%s\n' "$label" "$workers" "$mps" "$farm_runs" >"$raw/farm-$key.tsv"
  farm_runs=$((farm_runs + 1))
  write_farm_config "$dir/farm.json" "$endpoint" "$admin" "$dir/run" "$workers" "$mps"
  cp "$dir/farm.json" "$raw/farm-$key-config.json.txt"
  # A simple command, not through tf(): $! must be the supervisor itself, not a subshell.
  LD_LIBRARY_PATH="$runtime_ld" "$bin/torchfarm-supervisor" --config "$dir/farm.json" \
    --drain-timeout-ms 5000 >"$raw/farm-$key-supervisor.txt" 2>&1 &
  supervisor_pid=$!
  local measure=$((bench_seconds + bench_warmup)) ready_by t0
  t0="$(date +%s)"
  ready_by=$((step_end - measure - 15))  # room for the measurement and the stop
  [ "$ready_by" -gt $((t0 + 120)) ] && ready_by=$((t0 + 120))
  if ! wait_ready "$admin" "$ready_by" "$key"; then
    farm_not_ready="farm '$label' did not get ready: $step_note"
    stop_supervisor
    return 1
  fi
  log "farm ready: $workers workers after $(($(date +%s) - t0))s"
  step_note="$workers workers ready after $(($(date +%s) - t0))s, max_batch_size $farm_batch; req/s: the benchmark table"
  local argv=("$bin/torchfarm" bench --endpoint "$endpoint" --model "$model_name"
              --shape "$model_shape" --concurrency "$concurrency" --seconds "$bench_seconds"
              --warmup "$bench_warmup" --json --admin-endpoint "$admin")
  log "${argv[*]}"
  tf timeout -k 5 "$(capped $((measure + 30)))" "${argv[@]}" >"$raw/farm-$key.json.tmp"
  local rc=$?
  cat "$raw/farm-$key.json.tmp"
  keep_json "$raw/farm-$key.json"
  [ "$rc" -eq 0 ] || step_note="$step_note; torchfarm bench exited $rc$([ "$rc" -eq 124 ] && echo ' (time budget)')"
  tf timeout 10 "$bin/torchfarm" stats --admin "$admin" --json >"$raw/farm-$key-stats.json" 2>/dev/null
  tf timeout 10 "$bin/torchfarm" stats --admin "$admin" 2>/dev/null | tail -n +3
  stop_supervisor
  grep -E 'level=(warn|error)' "$raw/farm-$key-supervisor.txt" | head -n 10
  return "$rc"
}
write_farm_config() {  # write_farm_config FILE ENDPOINT ADMIN RUN_DIR WORKERS MPS
  cat >"$1" <<EOF
{
  "endpoint": "$2",
  "admin_endpoint": "$3",
  "run_dir": "$4",
  "gpu": {"mps": "$6"},
  "models": [
    {
      "name": "$model_name",
      "path": "$model_file",
      "inputs": [{"dtype": "float32", "shape": [-1, $model_dims]}],
      "instances": [{"device": "cuda:0", "count": $5, "precision": "$precision",
                     "streams": $farm_streams}],
      "max_batch_size": $farm_batch,
      "max_queue_delay_us": 2000,
      "slot_bytes": $slot_bytes,
      "warmup": [1, $farm_batch]
    }
  ]
}
EOF
}
wait_ready() {  # wait_ready ADMIN UNTIL_EPOCH KEY: 0 once every worker is ready
  local admin="$1" until="$2" key="$3" health start
  start="$(date +%s)"
  while [ "$(date +%s)" -lt "$until" ]; do
    if ! kill -0 "$supervisor_pid" 2>/dev/null; then
      tail -n 30 "$raw/farm-$key-supervisor.txt"
      step_note="the supervisor exited during start-up: $(grep -m 1 -E 'level=error' "$raw/farm-$key-supervisor.txt" | cut -c 1-200)"
      return 1
    fi
    health="$(tf timeout 5 "$build_dir/bin/torchfarm" ctl health --admin "$admin" --json --timeout-ms 1000 2>/dev/null)"
    if python3 -c 'import json,sys; h=json.loads(sys.argv[1]); sys.exit(0 if all(m["ready_workers"] == m["workers"] for m in h["models"]) else 1)' "$health" 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  tail -n 30 "$raw/farm-$key-supervisor.txt"
  step_note="workers not all ready within $((until - start))s (120 s or what the budget left): $(grep -m 1 -E 'level=(error|warn)' "$raw/farm-$key-supervisor.txt" | cut -c 1-160)"
  return 1
}
stop_supervisor() {
  [ -n "$supervisor_pid" ] || return 0
  kill -TERM "$supervisor_pid" 2>/dev/null
  for _ in $(seq 1 20); do
    kill -0 "$supervisor_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$supervisor_pid" 2>/dev/null; then
    log "supervisor did not stop within 10s of SIGTERM: SIGKILL"
    kill -KILL "$supervisor_pid" 2>/dev/null
  fi
  wait "$supervisor_pid" 2>/dev/null
  log "supervisor exited with status $?"
  supervisor_pid=""
}
step_farm_1() { farm_bench 1w "farm, 1 worker" 1 off; }
step_farm_4() { farm_bench 4w "farm, 4 workers, MPS off" 4 off; }
step_farm_4_mps() { farm_bench 4w-mps "farm, 4 workers, MPS auto" 4 auto; }
