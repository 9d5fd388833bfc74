# shellcheck shell=bash disable=SC2154  # raw, prefix, build_dir, work...: globals of tools/gpu-check.sh
# Steps 3-7 of tools/gpu-check.sh (sourced by it, not run): the prefix, CMake, the two builds and
# the GPU tests, each command under a timeout capped at the time left of the budget.
#
#   step_unpack       the .debs into the prefix (gpu-prefix.sh), skipped when already there
#   step_configure    CMake against the pip LibTorch + the prefix; when it fails over a missing
#                     CUDA::nvToolsExt (gone in CUDA 12.9+/13), once more with
#                     tools/gpu-check-nvtx3.cmake, which makes it stand for CUDA::nvtx3
#   step_build_tests  gpu_test only: what `ctest -L gpu` runs, built first
#   step_gpu_tests    ctest -L gpu, capped at kCtestCapS
#   step_build_bench  the programs the benchmarks run

# ---- 3. unpack ---------------------------------------------------------------------------------
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
    step_note="already unpacked (same .deb files)"
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
  step_note="${#debs[@]} .debs with $method"
}

# ---- 4. configure ------------------------------------------------------------------------------
generator=()
configure_args() {  # the CMake command line, into the array configure_argv
  local pkg_config search rpath_link
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
  search="$prefix/usr;$prefix/usr/lib/$multiarch/cmake"
  [ -n "$torch_prefix" ] && search="$torch_prefix;$search"
  rpath_link="$(IFS=:; echo "${lib_dirs[*]}")"
  configure_argv=(
    -S "$repo_root" -B "$build_dir" "${generator[@]}"
    -DCMAKE_BUILD_TYPE=Release
    -DTORCHFARM_BUILD_TESTS=ON
    "-DCMAKE_PREFIX_PATH=$search"
    "-DCMAKE_LIBRARY_PATH=$prefix/usr/lib/$multiarch;$prefix/lib/$multiarch"
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$rpath_link"
    # Named, or FindPkgConfig would pick the prefix's bare pkgconf (found through
    # CMAKE_PREFIX_PATH), which cannot load its library where the machine lacks libpkgconf3.
    "-DPKG_CONFIG_EXECUTABLE=$pkg_config"
  )
  [ -n "$cuda_architectures" ] && configure_argv+=("-DCMAKE_CUDA_ARCHITECTURES=$cuda_architectures")
  [ -n "${CUDACXX:-}" ] && configure_argv+=("-DCUDAToolkit_ROOT=$CUDA_HOME")
  if [ "$(cmake --version | head -n 1 | grep -oE '[0-9]+' | head -n 1)" -ge 4 ]; then
    configure_argv+=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)  # the .debs' CMake files predate CMake 4
  fi
}
run_cmake() {  # run_cmake LOG ARGS...: cmake under the time left (at most 180 s)
  local out="$1" rc
  shift
  timeout -k 5 "$(capped 180)" cmake "$@" >"$out" 2>&1
  rc=$?
  grep -E 'CUDA|Torch|torchfarm|nvtx|warning|Warning|Error|error' "$out" | head -n 40
  [ "$rc" -eq 124 ] && echo "cmake: stopped by the time budget" >>"$out"
  return "$rc"
}
step_configure() {
  needs step_unpack || return 77
  command -v cmake >/dev/null || { step_note="cmake not found"; return 1; }
  if command -v ninja >/dev/null; then generator=(-G Ninja)
  else generator=(-G "Unix Makefiles"); log "warning: no ninja; using Makefiles"
  fi
  configure_args
  log "cmake ${configure_argv[*]}"
  if ! run_cmake "$raw/cmake-configure.txt" "${configure_argv[@]}"; then
    tail -n 30 "$raw/cmake-configure.txt"
    if ! grep -qi 'nvToolsExt' "$raw/cmake-configure.txt"; then
      step_note="cmake configure failed, not retried (the log does not name nvToolsExt): $(first_error "$raw/cmake-configure.txt")"
      return 1
    fi
    log "configure failed over CUDA::nvToolsExt: once more, with CUDA::nvToolsExt standing for CUDA::nvtx3"
    configure_argv+=("-DCMAKE_PROJECT_INCLUDE=$repo_root/tools/gpu-check-nvtx3.cmake")
    env_set nvtx3_fallback "used"
    if ! run_cmake "$raw/cmake-configure-retry.txt" "${configure_argv[@]}"; then
      tail -n 30 "$raw/cmake-configure-retry.txt"
      step_note="cmake configure failed twice (the second with the CUDA::nvtx3 fallback): $(first_error "$raw/cmake-configure-retry.txt")"
      return 1
    fi
    step_note="configured on the retry, CUDA::nvToolsExt -> CUDA::nvtx3"
  fi
  local standard
  standard="$(grep -hoE 'LibTorch [^:]*: C\+\+[0-9]+' "$raw"/cmake-configure*.txt | tail -n 1)"
  env_set cxx_standard "${standard##*: }"
  step_note="${step_note:+$step_note; }${standard:-LibTorch version not printed}"
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
  if [ "$outside" -gt 0 ]; then
    log "WARNING: $outside dependencies resolved outside the prefix"
    step_note="${step_note:+$step_note; }$outside dependencies outside the prefix"
  fi
}

# ---- 5 and 7. build ----------------------------------------------------------------------------
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
build_targets() {  # build_targets LOG TARGET...: the existing ones, under the time left
  local out="$1" t0 rc t available targets=() missing=() keep_going=()
  shift
  available="$(cmake --build "$build_dir" --target help 2>/dev/null)"
  for t in "$@"; do
    if grep -qE "(^|\.\.\. )$t(:| |\$)" <<<"$available"; then targets+=("$t")
    else log "target $t does not exist in this tree: not built"
    fi
  done
  [ "${#targets[@]}" -gt 0 ] || { step_note="none of $* exists in this tree"; return 1; }
  [ "${generator[1]:-}" = Ninja ] && keep_going=(-- -k 0)
  log "building ${targets[*]} with -j$jobs, at most $(left)s"
  t0="$(date +%s)"
  touch "$work/build-start"
  timeout -k 10 "$(capped 3600)" cmake --build "$build_dir" --target "${targets[@]}" -j "$jobs" \
    "${keep_going[@]}" >"$out" 2>&1
  rc=$?
  env_set "$(basename "$out" .txt)_seconds" "$(($(date +%s) - t0))"
  grep -E 'warning:|error:' "$out" | head -n 30
  for t in "${targets[@]}"; do
    # After a failed or cut build, only programs it linked count.
    if [ -x "$build_dir/bin/$t" ] && { [ "$rc" -eq 0 ] || [ "$build_dir/bin/$t" -nt "$work/build-start" ]; }; then
      built_targets+="$t "
    else
      missing+=("$t")
    fi
  done
  log "built so far:${built_targets% }"
  if [ "$rc" -eq 0 ]; then step_note="built ${targets[*]} in $(($(date +%s) - t0))s"; return 0; fi
  grep -B2 -A12 '^FAILED:' "$out" | head -n 60
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    step_note="build stopped by the time budget after $(($(date +%s) - t0))s; NOT built: ${missing[*]:-none}"
  else
    step_note="NOT built: ${missing[*]:-?}: $(first_error "$out")"
  fi
  return 1
}
step_build_tests() {
  needs step_configure || return 77
  build_targets "$raw/build-tests.txt" gpu_test
}
step_build_bench() {
  needs step_configure || return 77
  local targets=(torchfarm-supervisor torchfarm-worker torchfarm torchfarm-bench-inprocess
                 torchfarm-gpu-bandwidth)
  [ "$model_name" = convnet ] && targets+=(torchfarm-mkmodel)
  build_targets "$raw/build-bench.txt" "${targets[@]}"
  local rc=$?
  show_system_headers
  [ "$built_targets" != " " ] && resolve_runtime_libs
  return "$rc"
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
    [ -x "$build_dir/bin/$b" ] || continue
    log "ldd $b: $(tf ldd "$build_dir/bin/$b" 2>&1 | grep -E 'zmq|sodium|prometheus|systemd|civetweb|torch_cuda|cudart|not found' | awk '{print $1 "=" $3}' | tr '\n' ' ')"
  done
}

# ---- 6. gpu tests ------------------------------------------------------------------------------
step_gpu_tests() {
  needs_built gpu_test || return 77
  [ "$built_targets" != " " ] && resolve_runtime_libs
  local limit
  limit="$(capped "$kCtestCapS")"
  log "ctest -L gpu, at most ${limit}s"
  (cd "$build_dir" && tf timeout -k 5 "$limit" ctest -L gpu --output-on-failure) \
    >"$raw/ctest-gpu.txt" 2>&1
  local rc=$?
  cat "$raw/ctest-gpu.txt"
  grep -q 'No tests were found' "$raw/ctest-gpu.txt" && { step_note="no tests labelled gpu"; return 77; }
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    step_note="stopped at ${limit}s (the cap); what ran is in raw/ctest-gpu.txt"
    return 1
  fi
  step_note="$(grep -E 'tests passed|tests failed' "$raw/ctest-gpu.txt" | head -n 1)"
  local failed
  failed="$(sed -n '/The following tests FAILED/,$p' "$raw/ctest-gpu.txt" | grep -E '^\s+[0-9]+ - ' | sed 's/^ *//' | tr '\n' ' ')"
  [ -n "$failed" ] && step_note="$step_note; FAILED: $failed"
  if grep -q 'Skipped' "$raw/ctest-gpu.txt"; then
    step_note="$step_note; $(grep -c 'Skipped' "$raw/ctest-gpu.txt") GTEST_SKIP lines"
  fi
  return "$rc"
}
