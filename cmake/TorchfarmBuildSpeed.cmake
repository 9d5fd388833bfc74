# Build speed (issue 16; measured in docs/benchmarks.md, "Developer loop"). Included from the root
# CMakeLists.txt after the compile flags are set and before any target exists.
#
# TORCHFARM_CCACHE=ON (default): compile through ccache when it is installed (tools/install-deps.sh
# installs Debian's), unless a compiler launcher was set already (-DCMAKE_CXX_COMPILER_LAUNCHER=...
# or the environment variable of that name). ccache caches a compile that uses a precompiled
# header only with sloppiness pch_defines,time_macros (ccache manual, "Precompiled headers"): the
# launcher sets CCACHE_SLOPPINESS for its compiles, which replaces a sloppiness of ccache.conf.
#
# TORCHFARM_PCH=ON (default): precompiled headers.
#   torchfarm_use_torch_pch(<target>)  LibTorch's headers (torch/script.h, ATen) plus nlohmann/json
#       and cppzmq, compiled once by torchfarm_torch_pch and reused (REUSE_FROM) by every target
#       that includes LibTorch: parsing them is most of what a LibTorch file costs.
#   torchfarm_precompile(<target> [HEADERS ...])  nlohmann/json, cppzmq and the standard headers
#       (plus HEADERS), one precompiled header per library: per target because -fPIC and the
#       sanitized trees (TORCHFARM_SANITIZE) give libraries different flags, and a precompiled
#       header is only valid for the flags it was made with (GCC ignores it, clang refuses it).
#   torchfarm_precompile_test(<target>)  test code without LibTorch: -O0 and one precompiled
#       header with GoogleTest shared by all such tests (torchfarm_test_pch).
# Either can be switched off (-DTORCHFARM_PCH=OFF) to check that every file includes what it uses.
#
# TORCHFARM_UNITY=ON (default): unity builds (issue 28). Every library and binary compiles its
# sources in batches of up to 16 files as one translation unit, so the templates of nlohmann/json,
# cppzmq, CLI11, Beast and LibTorch are instantiated and optimised once per batch instead of once
# per file (a clean Release build: 1,323 -> see docs/benchmarks.md "Developer loop"). A library
# then needs no precompiled header of its own (its batch parses the headers once), so
# torchfarm_precompile does nothing; LibTorch's and the tests' shared ones stay. Test executables
# opt in (torchfarm_add_test(... UNITY)) once their file-local names do not collide. Two files of
# one target may not then define the same name in an anonymous namespace. -DTORCHFARM_UNITY=OFF
# builds file by file (to check that each file stands alone, as CI's sanitizer trees do not).
option(TORCHFARM_CCACHE "Compile through ccache when it is installed" ON)
option(TORCHFARM_PCH "Precompiled headers for LibTorch, nlohmann/json, cppzmq and GoogleTest" ON)
option(TORCHFARM_UNITY "Unity builds: each target's sources in batches of 16 files" ON)
if(TORCHFARM_UNITY)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 16)
endif()

if(TORCHFARM_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(TORCHFARM_CCACHE_PROGRAM ccache)
  if(TORCHFARM_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
        CCACHE_SLOPPINESS=pch_defines,time_macros ${TORCHFARM_CCACHE_PROGRAM})
    message(STATUS "ccache: ${TORCHFARM_CCACHE_PROGRAM} (CCACHE_DISABLE=1 to bypass)")
  endif()
endif()

set(TORCHFARM_PCH_STD_HEADERS <algorithm> <atomic> <chrono> <cstdint> <cstring> <functional> <map>
    <memory> <mutex> <optional> <string> <thread> <unordered_map> <vector>)
set(TORCHFARM_PCH_LIBRARY_HEADERS <nlohmann/json.hpp> <zmq.hpp>)
set(TORCHFARM_PCH_TEST_HEADERS <gtest/gtest.h> <gmock/gmock.h>)
set(TORCHFARM_PCH_SOURCE ${CMAKE_CURRENT_LIST_DIR}/pch.cc)

# Test code compiles at -O0: the code under test comes from the libraries with the build type's
# flags, and a GoogleTest + nlohmann/json file costs half the CPU time at -O0 that it does at -O2.
# Not for the tests that reuse the LibTorch precompiled header: -O changes predefined macros
# (__OPTIMIZE__) that a precompiled header must agree on.
set(TORCHFARM_TEST_COMPILE_OPTIONS -O0 CACHE STRING
    "Compile options of test code that does not include LibTorch (empty: the build type's)")

# torchfarm_precompile(<target> [HEADERS <extra headers>...]): a precompiled header of its own.
function(torchfarm_precompile target)
  if(NOT TORCHFARM_PCH OR TORCHFARM_UNITY)
    return()
  endif()
  cmake_parse_arguments(P "" "" "HEADERS" ${ARGN})
  target_precompile_headers(${target} PRIVATE ${TORCHFARM_PCH_STD_HEADERS}
                            ${TORCHFARM_PCH_LIBRARY_HEADERS} ${P_HEADERS})
endfunction()

# torchfarm_precompile_test(<target>): test code without LibTorch (at TORCHFARM_TEST_COMPILE_OPTIONS)
# shares one precompiled header with GoogleTest, made by torchfarm_test_pch. A sanitized tree gives
# only some tests the sanitizer flags, so there each test makes its own.
function(torchfarm_precompile_test target)
  # -pthread everywhere: some tests get it from their libraries (gRPC, Boost.Asio), and a header
  # precompiled without its _REENTRANT is rejected by them (-Winvalid-pch), which left the
  # supervisor and front-end tests compiling without one.
  target_compile_options(${target} PRIVATE ${TORCHFARM_TEST_COMPILE_OPTIONS} -pthread)
  if(NOT TORCHFARM_PCH)
    return()
  endif()
  if(TORCHFARM_SANITIZE)
    torchfarm_precompile(${target} HEADERS ${TORCHFARM_PCH_TEST_HEADERS})
    return()
  endif()
  if(NOT TARGET torchfarm_test_pch)
    add_library(torchfarm_test_pch OBJECT ${TORCHFARM_PCH_SOURCE})
    target_link_libraries(torchfarm_test_pch PRIVATE cppzmq nlohmann_json::nlohmann_json
                          GTest::gtest)
    target_compile_options(torchfarm_test_pch PRIVATE ${TORCHFARM_TEST_COMPILE_OPTIONS} -pthread)
    target_precompile_headers(torchfarm_test_pch PRIVATE ${TORCHFARM_PCH_STD_HEADERS}
                              ${TORCHFARM_PCH_LIBRARY_HEADERS} ${TORCHFARM_PCH_TEST_HEADERS})
  endif()
  target_precompile_headers(${target} REUSE_FROM torchfarm_test_pch)
endfunction()

# The one LibTorch precompiled header. Its users share its flags: none of them is sanitized or
# -fPIC (cmake/TorchfarmSanitize.cmake lists no LibTorch target).
if(TORCHFARM_PCH)
  add_library(torchfarm_torch_pch OBJECT ${TORCHFARM_PCH_SOURCE})
  target_link_libraries(torchfarm_torch_pch PRIVATE ${TORCH_LIBRARIES} cppzmq
                        nlohmann_json::nlohmann_json)
  target_precompile_headers(torchfarm_torch_pch PRIVATE <torch/script.h> <ATen/Parallel.h>
                            ${TORCHFARM_PCH_STD_HEADERS} ${TORCHFARM_PCH_LIBRARY_HEADERS})
endif()

function(torchfarm_use_torch_pch target)
  if(TORCHFARM_PCH)
    target_precompile_headers(${target} REUSE_FROM torchfarm_torch_pch)
  endif()
endfunction()
