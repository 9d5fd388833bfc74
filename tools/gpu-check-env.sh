# shellcheck shell=bash disable=SC2154,SC2034  # globals shared with tools/gpu-check.sh and its parts
# Steps 1 and 2 of tools/gpu-check.sh (sourced by it, not run): the facts about the machine that
# decide whether anything after them can work, and the room in /dev/shm for the farm runs.
#
#   step_env   driver, nvidia-smi, nvcc, glibc, df -h /dev/shm, the pip PyTorch (version, CUDA,
#              compiled_with_cxx11_abi); sets stop_reason on a pre-C++11-ABI PyTorch (the Debian
#              .debs' C++ libraries cannot link with it) and on a machine without a GPU
#   step_shm   the farm runs' ring segments against /dev/shm: remount when it is small, else
#              shrink the batch, then the workers, and say so

has_gpu=0
torch_prefix=""
cuda_architectures=""
# The benchmark model: ResNet-50 wherever python3 imports torch (export_torchvision.py builds its
# own copy without torchvision); convnet, on the CPU, in a rehearsal without PyTorch.
model_name=resnet50
model_shape="1,3,224,224"
model_dims="3, 224, 224"
row_bytes=$((3 * 224 * 224 * 4))
precision=fp16

step_env() {
  env_set date "$(date '+%Y-%m-%d %H:%M %Z')"
  env_set rehearsal "$rehearse"
  env_set host "$(hostname 2>/dev/null)"
  env_set os "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}") $(uname -m), kernel $(uname -r)"
  env_set nproc "$(nproc)"
  env_set glibc "$(ldd --version 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+$')"
  log "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(uname -m), kernel $(uname -r), $(nproc) cores"
  log "glibc: $(ldd --version 2>/dev/null | head -n 1)"
  local glibc_minor
  glibc_minor="$(ldd --version 2>/dev/null | head -n 1 | grep -oE '2\.[0-9]+$' | cut -d. -f2)"
  if [ -n "$glibc_minor" ] && [ "$glibc_minor" -lt 34 ]; then
    log "WARNING: glibc < 2.34: the Debian 12 libraries of the prefix (libzmq5...) will not load"
  fi
  [ "$(uname -m)" = x86_64 ] || log "WARNING: the .debs are amd64; this machine is $(uname -m)"
  df -h /dev/shm 2>&1 | tee "$raw/df-shm.txt"
  env_set shm "$(df -Ph /dev/shm 2>/dev/null | awk 'NR == 2 {print $2 " size, " $4 " free"}')"
  find_nvcc
  find_gpu
  read_torch || return 1
  log "cmake: $(cmake --version 2>/dev/null | head -n 1 || echo MISSING)"
  log "ninja: $(ninja --version 2>/dev/null || echo 'missing (Makefiles)')"
  log "c++: $(${CXX:-c++} --version 2>/dev/null | head -n 1)"
  env_set cmake "$(cmake --version 2>/dev/null | head -n 1 | grep -oE '[0-9][0-9.]*')"
  env_set cxx "$(${CXX:-c++} --version 2>/dev/null | head -n 1)"
  [ "$has_gpu" = 1 ] || env_set gpu none
  if [ "$has_gpu" = 0 ] && [ "$rehearse" != 1 ]; then
    stop_reason="no GPU visible (neither nvidia-smi nor torch.cuda sees one)"
    step_note="$stop_reason"
    return 1
  fi
  [ "$has_gpu" = 1 ] || { precision=fp32; log "no GPU: benchmarks in fp32 on the CPU"; }
  step_note="GPU: $(grep -m 1 $'^gpu\t' "$raw/env.tsv" | cut -f2); PyTorch: $(grep -m 1 $'^torch\t' "$raw/env.tsv" | cut -f2)"
}

find_nvcc() {
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
}

find_gpu() {
  if command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi -L >/dev/null 2>&1; then
    has_gpu=1
    timeout 20 nvidia-smi >"$raw/nvidia-smi.txt" 2>&1
    head -n 20 "$raw/nvidia-smi.txt"
    local query
    query="$(timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total \
      --format=csv,noheader 2>/dev/null | head -n 1)"
    log "gpu 0: $query"
    env_set gpu "$(echo "$query" | cut -d, -f1 | xargs)"
    env_set driver "$(echo "$query" | cut -d, -f2 | xargs)"
    env_set gpu_memory "$(echo "$query" | cut -d, -f4 | xargs)"
    set_cuda_architectures "$(echo "$query" | cut -d, -f3 | xargs)"
    if command -v nvidia-cuda-mps-control >/dev/null; then
      log "MPS: $(command -v nvidia-cuda-mps-control)"
    else
      log "MPS: nvidia-cuda-mps-control not on PATH"
    fi
  else
    log "nvidia-smi: no GPU visible"
  fi
}

# The pip PyTorch: version, CUDA, CMake prefix, device, C++ ABI. A pre-C++11 ABI stops the check.
read_torch() {
  local torch_info
  if torch_info="$(timeout 90 "$python" -c 'import torch, torch.utils
print(torch.__version__)
print(torch.version.cuda)
print(torch.utils.cmake_prefix_path)
print(torch.cuda.is_available() and torch.cuda.get_device_name(0))
print(torch.compiled_with_cxx11_abi())
print("%d.%d" % torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "-")' 2>&1)"; then
    local version abi device
    version="$(sed -n 1p <<<"$torch_info")" device="$(sed -n 4p <<<"$torch_info")"
    abi="$(sed -n 5p <<<"$torch_info")"
    torch_prefix="$(sed -n 3p <<<"$torch_info")"
    env_set torch "$version"
    env_set torch_cuda "$(sed -n 2p <<<"$torch_info")"
    env_set cxx11_abi "$abi"
    log "python3 torch $version, CUDA $(sed -n 2p <<<"$torch_info"), device: $device"
    log "torch cmake prefix: $torch_prefix; compiled_with_cxx11_abi: $abi (the Debian .debs need True)"
    if [ "$abi" != True ]; then
      stop_reason="PyTorch $version was built with the pre-C++11 ABI (compiled_with_cxx11_abi() is $abi): the Debian .debs' C++ libraries (libzmq, prometheus-cpp, gtest) cannot link with it"
      step_note="$stop_reason"
      return 1
    fi
    if [ "$has_gpu" = 0 ] && [ "$device" != False ]; then
      has_gpu=1  # no nvidia-smi in this container, but PyTorch sees the device
      env_set gpu "$device"
      set_cuda_architectures "$(sed -n 6p <<<"$torch_info")"
    fi
  elif [ "$rehearse" = 1 ]; then
    log "$python cannot import torch; rehearsal: building against Debian's LibTorch"
    env_set torch "Debian LibTorch $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null)"
    env_set cxx11_abi "True (Debian's LibTorch)"
    model_name=convnet model_shape="1,3,32,32" model_dims="3, 32, 32" row_bytes=$((3 * 32 * 32 * 4))
  else
    log "$python cannot import torch: $(tail -n 1 <<<"$torch_info")"
    stop_reason="no pip PyTorch: $python -c 'import torch' failed: $(tail -n 1 <<<"$torch_info" | cut -c 1-160)"
    step_note="$stop_reason"
    return 1
  fi
}

set_cuda_architectures() {  # set_cuda_architectures 9.0: build for this GPU only
  if [[ "$1" =~ ^[0-9]+\.[0-9]+$ ]]; then
    export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$1}"
    cuda_architectures="${1/./}"
  fi
}

# ---- 2. /dev/shm ---------------------------------------------------------------------------------
# Each worker maps one segment of 2 rings x kRingSlots slots x slot_bytes (ring_slots' default is
# max(4, max_inflight_per_worker)), and pins it with cudaHostRegister: a /dev/shm too small for
# it gives ENOSPC or SIGBUS. slot_bytes is sized to the batch (64 x 602 KB images: 40 MiB).
readonly kRingSlots=4
farm_batch=64
farm_workers=4
slot_bytes=0
slot_bytes_for() {  # slot_bytes_for BATCH: the batch's input bytes + 1 MiB, rounded up to 4 MiB
  local four=$((4 << 20))
  echo $(((($1 * row_bytes + (1 << 20) + four - 1) / four) * four))
}
shm_need_mib() { echo $((farm_workers * (2 * kRingSlots * (slot_bytes >> 20) + 16))); }
shm_free_mib() {
  if [ -n "${GPU_CHECK_SHM_MIB:-}" ]; then echo "$GPU_CHECK_SHM_MIB"
  else df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}'
  fi
}
step_shm() {
  slot_bytes="$(slot_bytes_for "$farm_batch")"
  local free need before remount=""
  free="$(shm_free_mib)"
  [ -n "$free" ] || { step_note="no /dev/shm (df -P /dev/shm failed): the ring segments live there"; return 1; }
  need="$(shm_need_mib)" before="$free"
  log "/dev/shm: $free MiB free; the farm runs need $need MiB ($farm_workers workers x 2 rings x $kRingSlots slots x $((slot_bytes >> 20)) MiB, batch $farm_batch of $row_bytes-byte rows)"
  if [ "$free" -lt "$need" ] && [ "$(id -u)" = 0 ] && [ -z "${GPU_CHECK_SHM_MIB:-}" ]; then
    local size want
    size="$(df -Pm /dev/shm | awk 'NR == 2 {print $2}')"
    want=$((size + need - free + 256))
    if timeout 20 mount -o "remount,size=${want}m" /dev/shm >"$raw/shm-remount.txt" 2>&1; then
      free="$(shm_free_mib)"
      remount="remounted /dev/shm from $size to $want MiB"
    else
      remount="remount to $want MiB refused: $(head -n 1 "$raw/shm-remount.txt")"
    fi
    log "$remount; $free MiB free now"
  fi
  if [ "$free" -ge "$need" ]; then
    step_note="$free MiB free, $need MiB needed${remount:+; $remount}"
    env_set shm_plan "$step_note"
    return 0
  fi
  while [ "$(shm_need_mib)" -gt "$free" ] && [ "$farm_batch" -gt 8 ]; do
    farm_batch=$((farm_batch / 2))
    slot_bytes="$(slot_bytes_for "$farm_batch")"
  done
  while [ "$(shm_need_mib)" -gt "$free" ] && [ "$farm_workers" -gt 1 ]; do
    farm_workers=$((farm_workers / 2))
  done
  local what="/dev/shm has $before MiB free, the farm runs need $need MiB${remount:+ ($remount)}"
  if [ "$(shm_need_mib)" -gt "$free" ]; then
    step_note="$what, more than even 1 worker with batch 8 needs: farm runs skipped"
    env_set shm_plan "$step_note"
    return 1
  fi
  step_note="SHRUNK: $what, so they use max_batch_size $farm_batch (slot_bytes $((slot_bytes >> 20)) MiB) and at most $farm_workers workers"
  log "$step_note"
  env_set shm_plan "$step_note"
}
