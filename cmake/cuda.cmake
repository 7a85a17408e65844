# The CUDA backend: built when nvcc, the CUDA runtime, cuBLAS/cuBLASLt and NVRTC are
# found (KILN_CUDA=AUTO, the default), required (ON) or never (OFF). Sets
# KILN_HAVE_CUDA; without it everything else builds exactly as on a machine
# with no CUDA toolkit.
set(KILN_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when the toolkit is found), ON or OFF")
set_property(CACHE KILN_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KILN_HAVE_CUDA OFF)

function(kiln_cuda_unavailable why)
  if(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but ${why}")
  endif()
  message(STATUS "CUDA backend: off (${why})")
endfunction()

if(KILN_CUDA STREQUAL "OFF")
  message(STATUS "CUDA backend: off (KILN_CUDA=OFF)")
elseif(KILN_SANITIZE AND KILN_CUDA STREQUAL "AUTO")
  # The CUDA runtime and ASan's shadow memory do not mix without extra flags.
  message(STATUS "CUDA backend: off under KILN_SANITIZE (set KILN_CUDA=ON to force it)")
else()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    kiln_cuda_unavailable("no nvcc found (set CMAKE_CUDA_COMPILER)")
  else()
    # H200/H100 machine code plus compute_90 PTX, which newer GPUs JIT-compile.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart OR NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cublasLt
       OR NOT TARGET CUDA::nvrtc)
      kiln_cuda_unavailable("the CUDA runtime, cuBLAS/cuBLASLt or NVRTC libraries were not found")
    else()
      set(KILN_HAVE_CUDA ON)
      # C++20 device code: nvcc has it since 12.0; CMake before 3.26 does not know the flag.
      if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
        message(FATAL_ERROR "the CUDA backend needs nvcc 12.0 or newer (C++20), found ${CMAKE_CUDA_COMPILER_VERSION}")
      endif()
      if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      endif()
      set(CMAKE_CUDA_STANDARD 20)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
      message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
    endif()
  endif()
endif()
