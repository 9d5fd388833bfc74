# The configure retry of tools/gpu-check.sh (-DCMAKE_PROJECT_INCLUDE=this file, read right after
# project()): CUDA 12.9 dropped libnvToolsExt (NVTX v2) and CUDA 13 its CMake target
# CUDA::nvToolsExt, but the CMake files of some pip LibTorch builds (Caffe2's cuda.cmake,
# torch::nvtoolsext) still link to it, and configuring fails with "CUDA::nvToolsExt ... target
# was not found". Here CUDA::nvToolsExt becomes an interface target that stands for the
# header-only NVTX v3 (CUDA::nvtx3, CMake >= 3.25; else made from the toolkit's nvtx3/ headers).
# Nothing changes where the toolkit still has CUDA::nvToolsExt.
find_package(CUDAToolkit QUIET)
if(NOT TARGET CUDA::nvToolsExt)
  if(NOT TARGET CUDA::nvtx3 AND CUDAToolkit_FOUND)
    foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
      if(EXISTS "${dir}/nvtx3/nvToolsExt.h")
        add_library(CUDA::nvtx3 INTERFACE IMPORTED)
        target_include_directories(CUDA::nvtx3 SYSTEM INTERFACE "${dir}")
        target_link_libraries(CUDA::nvtx3 INTERFACE ${CMAKE_DL_LIBS})
        break()
      endif()
    endforeach()
  endif()
  if(TARGET CUDA::nvtx3)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
    message(STATUS "gpu-check: CUDA::nvToolsExt stands for CUDA::nvtx3 (CUDA ${CUDAToolkit_VERSION})")
  else()
    message(WARNING "gpu-check: no CUDA::nvToolsExt and no nvtx3 headers (CUDAToolkit_FOUND=${CUDAToolkit_FOUND}): the fallback cannot help")
  endif()
endif()
