# Which LibTorch the build links (issue 29). Included from the root CMakeLists.txt before any
# target that uses LibTorch; sets what find_package(Torch) would: TORCH_LIBRARIES (a target),
# TORCH_INCLUDE_DIRS, TORCH_INSTALL_PREFIX, TORCH_CXX_FLAGS and Torch_VERSION, plus
# TORCHFARM_HAVE_AOTI (LibTorch has torch::inductor::AOTIModelPackageLoader).
#
# TORCHFARM_TORCH=venv (the default): pip's PyTorch in the project's .venv (tools/install-deps.sh), or
#   the site-packages/torch folder named by TORCHFARM_TORCH_DIR. find_package(Torch) on that wheel
#   fails (its Caffe2 config wants a CUDA toolkit: /work/shared/MACHINE.md), so this file makes an
#   imported target by hand: the wheel's headers, libtorch.so, libtorch_cpu.so, libc10.so, the C++
#   ABI the wheel was built with, and an rpath into the venv so binaries start from the build tree
#   and from an install without LD_LIBRARY_PATH. The wheel's own libraries find its CUDA runtime
#   (nvidia/*/lib) through their RUNPATH; libtorch_cuda.so is loaded, and works without a GPU.
#   LibTorch's CUDA code is not compiled into the worker in this build (no CUDA toolkit here):
#   TORCHFARM_WITH_CUDA is OFF and cuda:N is refused as in the Debian build.
# TORCHFARM_TORCH=debian: Debian's libtorch-dev 1.13 through find_package(Torch), as before.
# TORCHFARM_TORCH=find: find_package(Torch) on CMAKE_PREFIX_PATH (a LibTorch zip, a source build).
set(TORCHFARM_TORCH venv CACHE STRING "LibTorch to build against: venv, debian or find")
set_property(CACHE TORCHFARM_TORCH PROPERTY STRINGS venv debian find)
set(TORCHFARM_TORCH_DIR "" CACHE PATH
    "site-packages/torch of TORCHFARM_TORCH=venv (empty: .venv's, found with the venv's python)")

if(TORCHFARM_TORCH STREQUAL "debian" OR TORCHFARM_TORCH STREQUAL "find")
  find_package(Torch REQUIRED)
  if(TORCHFARM_TORCH STREQUAL "debian" AND NOT Torch_DIR MATCHES "^/usr/")
    message(FATAL_ERROR "TORCHFARM_TORCH=debian: expected Debian's libtorch-dev under /usr, "
      "found Torch_DIR=${Torch_DIR} (use -DTORCHFARM_TORCH=find for another LibTorch)")
  endif()
elseif(TORCHFARM_TORCH STREQUAL "venv")
  set(_torch_dir "${TORCHFARM_TORCH_DIR}")
  if(NOT _torch_dir)
    file(GLOB _torch_dir "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch")
    list(LENGTH _torch_dir _count)
    if(NOT _count EQUAL 1)
      message(FATAL_ERROR
        "TORCHFARM_TORCH=venv: expected one ${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/"
        "torch, found ${_count} ('${_torch_dir}'). Run ./tools/install-deps.sh to create .venv, or "
        "configure with -DTORCHFARM_TORCH=debian for Debian's LibTorch 1.13.")
    endif()
  endif()
  set(_version_file "${_torch_dir}/version.py")
  if(NOT EXISTS "${_version_file}" OR NOT EXISTS "${_torch_dir}/lib/libtorch_cpu.so")
    message(FATAL_ERROR "TORCHFARM_TORCH=venv: '${_torch_dir}' is not a PyTorch wheel's torch "
      "folder (expected version.py and lib/libtorch_cpu.so in it)")
  endif()
  file(STRINGS "${_version_file}" _version_line REGEX "^__version__")
  if(NOT _version_line MATCHES "'([0-9]+\\.[0-9]+\\.[0-9]+)")
    message(FATAL_ERROR "TORCHFARM_TORCH=venv: no version in ${_version_file}: '${_version_line}'")
  endif()
  set(Torch_VERSION ${CMAKE_MATCH_1})
  # The wheel records its C++ ABI in torch/_C's build flags; every wheel since 2.7 is built with
  # the new ABI (torch._C._GLIBCXX_USE_CXX11_ABI is True for 2.15.0: MACHINE.md).
  if(Torch_VERSION VERSION_LESS 2.7)
    message(FATAL_ERROR "TORCHFARM_TORCH=venv: torch ${Torch_VERSION} in ${_torch_dir}; this "
      "module knows the ABI of wheels >= 2.7 only (pin one in tools/install-deps.sh, or use "
      "-DTORCHFARM_TORCH=find with that wheel's share/cmake)")
  endif()
  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=1")
  set(TORCH_INSTALL_PREFIX "${_torch_dir}")
  set(TORCH_INCLUDE_DIRS "${_torch_dir}/include" "${_torch_dir}/include/torch/csrc/api/include")
  set(_libs)
  foreach(_name torch torch_cpu c10)
    set(_lib "${_torch_dir}/lib/lib${_name}.so")
    if(NOT EXISTS "${_lib}")
      message(FATAL_ERROR "TORCHFARM_TORCH=venv: ${_lib} is missing")
    endif()
    list(APPEND _libs "${_lib}")
  endforeach()
  add_library(torchfarm_libtorch INTERFACE IMPORTED GLOBAL)
  # SYSTEM: LibTorch's own warnings are not ours (the Debian build gets this from its config).
  target_include_directories(torchfarm_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  target_compile_definitions(torchfarm_libtorch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
  # --no-as-needed: libtorch.so itself has no symbol a binary uses, but loading it brings in
  # libtorch_cuda.so's registrations (the CUDA allocator, cuda ops), as find_package's does.
  target_link_libraries(torchfarm_libtorch INTERFACE
    "-Wl,--no-as-needed" ${_libs} "-Wl,--as-needed" Threads::Threads)
  # Both the build tree's and installed binaries find the wheel's libraries without
  # LD_LIBRARY_PATH (CMAKE_INSTALL_RPATH_USE_LINK_PATH keeps them on install: TorchfarmInstall).
  target_link_options(torchfarm_libtorch INTERFACE "-Wl,-rpath,${_torch_dir}/lib")
  set(TORCH_LIBRARIES torchfarm_libtorch)
  set(Torch_FOUND TRUE)
  message(STATUS "LibTorch ${Torch_VERSION} from pip's wheel: ${_torch_dir}")
else()
  message(FATAL_ERROR "TORCHFARM_TORCH: expected venv, debian or find, got '${TORCHFARM_TORCH}'")
endif()

# AOTInductor packages (worker/aoti_model_runner.h): the package loader's header ships with
# LibTorch since 2.6; Debian's 1.13 has none, and that worker refuses .pt2 models with the reason.
set(TORCHFARM_HAVE_AOTI OFF)
foreach(_dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS "${_dir}/torch/csrc/inductor/aoti_package/model_package_loader.h")
    set(TORCHFARM_HAVE_AOTI ON)
  endif()
endforeach()
message(STATUS "AOTInductor package loader: ${TORCHFARM_HAVE_AOTI}")
