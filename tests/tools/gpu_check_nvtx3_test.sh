#!/usr/bin/env bash
# tools/gpu-check-nvtx3.cmake, the configure retry of tools/gpu-check.sh, on a small CMake project
# that links CUDA::nvToolsExt the way the CMake files of a pip LibTorch do (torch::nvtoolsext):
# with it, configure and build pass and the program calls NVTX v3; without it, on a toolkit that
# no longer has CUDA::nvToolsExt (CUDA 12.9+, 13), configure fails naming nvToolsExt, which is
# what gpu-check.sh's retry looks for. Skipped (77) without a CUDA toolkit.
#
#   bash tests/tools/gpu_check_nvtx3_test.sh SOURCE_DIR
set -uo pipefail
source_dir="$(cd "${1:?usage: gpu_check_nvtx3_test.sh SOURCE_DIR}" && pwd)"
cuda_root=""
for candidate in "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -n "$candidate" ] && [ -e "$candidate/include/nvtx3/nvToolsExt.h" ] && { cuda_root="$candidate"; break; }
done
[ -n "$cuda_root" ] || { echo "SKIP: no CUDA toolkit with nvtx3/ headers (CUDA_HOME, /usr/local/cuda)"; exit 77; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.19)
project(nvtx3_probe LANGUAGES CXX)
find_package(CUDAToolkit REQUIRED)
add_library(torch::nvtoolsext INTERFACE IMPORTED)  # as Caffe2's cuda.cmake declares it
set_property(TARGET torch::nvtoolsext PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvToolsExt)
add_executable(probe probe.cc)
target_link_libraries(probe PRIVATE torch::nvtoolsext)
CMAKE
printf '#include <nvtx3/nvToolsExt.h>\nint main() { nvtxRangePushA("probe"); nvtxRangePop(); return 0; }\n' \
  >"$tmp/probe.cc"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
common=(-S "$tmp" "${generator[@]}" "-DCUDAToolkit_ROOT=$cuda_root")
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if cmake "${common[@]}" -B "$tmp/with" "-DCMAKE_PROJECT_INCLUDE=$source_dir/tools/gpu-check-nvtx3.cmake" \
    >"$tmp/with.log" 2>&1; then
  cmake --build "$tmp/with" >>"$tmp/with.log" 2>&1 || fail "the probe with the fallback does not build: $(tail -n 5 "$tmp/with.log")"
  "$tmp/with/probe" || fail "the probe with the fallback does not run"
else
  fail "configure with the fallback failed: $(grep -A3 'CMake Error' "$tmp/with.log" | head -n 8)"
fi

if [ -e "$cuda_root/lib64/libnvToolsExt.so" ] || [ -e "$cuda_root/lib/x64/nvToolsExt64_1.lib" ]; then
  echo "note: this toolkit still has libnvToolsExt; the fallback must leave CUDA::nvToolsExt alone"
  grep -q 'stands for CUDA::nvtx3' "$tmp/with.log" && fail "the fallback replaced an existing CUDA::nvToolsExt"
else
  if cmake "${common[@]}" -B "$tmp/without" >"$tmp/without.log" 2>&1; then
    fail "configure without the fallback passed on a toolkit without libnvToolsExt"
  elif ! grep -qi nvtoolsext "$tmp/without.log"; then
    fail "configure without the fallback failed without naming nvToolsExt (gpu-check.sh would not retry)"
  fi
  grep -q 'stands for CUDA::nvtx3' "$tmp/with.log" || fail "the fallback did not say what it did"
fi
[ "$failures" -eq 0 ] && echo "PASS: CUDA::nvToolsExt -> CUDA::nvtx3 fallback ($cuda_root)"
[ "$failures" -eq 0 ]
