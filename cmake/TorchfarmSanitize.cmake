# Sanitizer and fuzzing builds (docs/security.md, `make test-asan`, `make fuzz`).
#
# TORCHFARM_SANITIZE=ON: ASan + UBSan on the targets that never link LibTorch (ring, protocol,
# batcher, supervisor, client, CLI and their tests), applied by torchfarm_apply_sanitizers() once
# every target exists. Static libraries pass the runtime on to whatever links them, so a worker
# built in such a tree links the runtime too; `make test-asan` builds no worker there and uses the
# unsanitized one of the normal build instead.
#
# TORCHFARM_FUZZ=ON (clang only): everything compiled in the tree gets libFuzzer's coverage
# instrumentation plus ASan + UBSan, and tests/fuzz adds the protocol_fuzzer binary. Use a build
# folder of its own (build-fuzz) and build only that target.
option(TORCHFARM_SANITIZE "ASan+UBSan on the non-LibTorch targets" OFF)
option(TORCHFARM_FUZZ "libFuzzer instrumentation and the fuzz targets (clang)" OFF)

set(TORCHFARM_SANITIZER_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)

if(TORCHFARM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TORCHFARM_FUZZ needs clang: configure with CXX=clang++-14 (make fuzz)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link ${TORCHFARM_SANITIZER_FLAGS})
  add_link_options(-fsanitize=address,undefined)
endif()

set(TORCHFARM_SANITIZED_TARGETS
  torchfarm_common torchfarm_jpeg torchfarm_ipc torchfarm_client torchfarm_intake torchfarm_loop torchfarm_security torchfarm_workers
  torchfarm_models torchfarm_admin torchfarm_dispatch torchfarm_supervisor torchfarm_tools
  torchfarm_bench_tools torchfarm-supervisor torchfarm
  common_test common_client_test common_multi_client_test ipc_test slot_codec_test
  supervisor_unit_test
  fuzz_regression_test jpeg_decoder_test ops_tools_unit_test security_test zero_copy_reply_test mps_test
  torchfarm_farm_fixture
  # The KServe v2 front ends (the generated gRPC code, torchfarm_v2_proto, is not ours: plain).
  torchfarm_v2_codec torchfarm_frontend v2_http_codec_test http_server_test grpc_server_test
  kserve_v2_test)

function(torchfarm_apply_sanitizers)
  if(NOT TORCHFARM_SANITIZE)
    return()
  endif()
  foreach(target ${TORCHFARM_SANITIZED_TARGETS})
    if(NOT TARGET ${target})
      continue()
    endif()
    target_compile_options(${target} PRIVATE ${TORCHFARM_SANITIZER_FLAGS})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "STATIC_LIBRARY")
      target_link_options(${target} INTERFACE -fsanitize=address,undefined)
    else()
      target_link_options(${target} PRIVATE -fsanitize=address,undefined)
    endif()
  endforeach()
endfunction()
