# CHIMERA_CUDA=AUTO|ON|OFF. AUTO enables the CUDA backend when a CUDA compiler and toolkit
# are found. Architectures: sm_80 and sm_90 as real code plus compute_90 PTX, so the
# library runs on A100/H100/H200 and JIT-compiles on newer parts; override with
# -DCMAKE_CUDA_ARCHITECTURES=native for a local build.
set(CHIMERA_HAVE_CUDA OFF)
if(NOT CHIMERA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(CHIMERA_HAVE_CUDA ON)
    endif()
  endif()
  if(CHIMERA_CUDA STREQUAL "ON" AND NOT CHIMERA_HAVE_CUDA)
    message(FATAL_ERROR "CHIMERA_CUDA=ON but no CUDA compiler/toolkit was found")
  endif()
endif()
