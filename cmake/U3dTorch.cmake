# LibTorch, from (in order): -DTorch_DIR=..., CMAKE_PREFIX_PATH, or the torch wheel in U3D_TORCH_VENV.
# Any LibTorch >= 2.6 works (official zip, a cluster's PyTorch); the project pins torch==2.11.0.

# TorchConfig needs a CUDA toolkit at configure time when LibTorch is a CUDA build: a system one when
# CMake finds nvcc (CUDAToolkit_ROOT, CMAKE_CUDA_COMPILER, PATH, /usr/local/cuda), else the CUDA 13.0
# compiler and headers that scripts/setup.sh installs from PyPI into the torch venv (nvidia/cu13).
if(NOT CUDAToolkit_ROOT AND NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDAToolkit_ROOT}
   AND NOT DEFINED ENV{CUDA_HOME} AND NOT DEFINED ENV{CUDACXX})
  find_program(_u3d_system_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  file(GLOB _u3d_pypi_nvcc "${U3D_TORCH_VENV}/lib/python3*/site-packages/nvidia/cu13/bin/nvcc")
  if(NOT _u3d_system_nvcc AND _u3d_pypi_nvcc)
    list(GET _u3d_pypi_nvcc 0 _u3d_pypi_nvcc)
    get_filename_component(_u3d_cuda_root "${_u3d_pypi_nvcc}/../.." ABSOLUTE)
    set(CUDAToolkit_ROOT "${_u3d_cuda_root}")
    set(CUDA_TOOLKIT_ROOT_DIR "${_u3d_cuda_root}" CACHE PATH "CUDA toolkit (PyPI's, in the torch venv)")
    set(CMAKE_CUDA_COMPILER "${_u3d_pypi_nvcc}" CACHE FILEPATH "nvcc (PyPI's, in the torch venv)")
    message(STATUS "u3d: no system CUDA toolkit; using the CUDA compiler and headers from PyPI in ${_u3d_cuda_root}")
  endif()
endif()
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  # CUDA 13 ships no nvToolsExt library; Caffe2's config still asks for CUDA::nvToolsExt
  # (pytorch #116242, #133293). The header-only NVTX3 target provides the same API.
  if(NOT TARGET CUDA::nvToolsExt AND TARGET CUDA::nvtx3)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
  endif()
endif()

if(NOT Torch_DIR AND NOT DEFINED ENV{Torch_DIR})
  set(_u3d_python "${U3D_TORCH_VENV}/bin/python")
  if(EXISTS "${_u3d_python}")
    execute_process(
      COMMAND "${_u3d_python}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _u3d_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET RESULT_VARIABLE _u3d_rc)
    if(_u3d_rc EQUAL 0 AND _u3d_torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_u3d_torch_prefix}")
    endif()
  endif()
endif()

# Two warnings of LibTorch's own config, with call stacks, that a normal build should not show:
# - Caffe2's cuda.cmake warns whenever CMAKE_CUDA_ARCHITECTURES is defined (it reads
#   TORCH_CUDA_ARCH_LIST instead), and its enable_language(CUDA) defines it under policy CMP0104's
#   NEW behaviour. OLD leaves it undefined; this project compiles no CUDA code of its own.
# - TorchConfig looks for a separate kineto library, which the wheels link into libtorch_cpu.so:
#   naming that library as kineto's is what it is.
if(POLICY CMP0104)
  cmake_policy(SET CMP0104 OLD)
endif()
set(_u3d_torch_root "")
if(Torch_DIR)
  get_filename_component(_u3d_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
elseif(_u3d_torch_prefix)
  get_filename_component(_u3d_torch_root "${_u3d_torch_prefix}/../.." ABSOLUTE)
endif()
if(NOT kineto_LIBRARY AND _u3d_torch_root AND EXISTS "${_u3d_torch_root}/lib/libtorch_cpu.so")
  set(kineto_LIBRARY "${_u3d_torch_root}/lib/libtorch_cpu.so" CACHE FILEPATH "kineto (linked into libtorch_cpu)")
endif()

find_package(Torch REQUIRED)
if(Torch_VERSION AND Torch_VERSION VERSION_LESS 2.6)
  message(FATAL_ERROR "u3d: LibTorch ${Torch_VERSION} found at ${Torch_DIR}; 2.6 or newer is required")
endif()
message(STATUS "u3d: LibTorch ${Torch_VERSION} from ${Torch_DIR}")

# LibTorch's include folder carries its own {fmt} (12.x) headers, while Debian's spdlog is compiled
# against libfmt 9. Shadow the torch include folders with copies made of symbolic links that leave
# `fmt/` out, so every `#include <fmt/...>` resolves to the system {fmt} that spdlog links.
set(_u3d_shadow_root "${CMAKE_BINARY_DIR}/torch-include")
set(_u3d_shadow_count 0)

# Shadow folder for one include folder holding fmt/ (created once per folder).
function(_u3d_shadow_dir dir out_var)
  string(MD5 _hash "${dir}")
  set(_shadow "${_u3d_shadow_root}/${_hash}")
  if(NOT EXISTS "${_shadow}")
    file(MAKE_DIRECTORY "${_shadow}")
    file(GLOB _entries RELATIVE "${dir}" "${dir}/*")
    foreach(_entry IN LISTS _entries)
      if(NOT _entry STREQUAL "fmt")
        file(CREATE_LINK "${dir}/${_entry}" "${_shadow}/${_entry}" SYMBOLIC)
      endif()
    endforeach()
  endif()
  set(${out_var} "${_shadow}" PARENT_SCOPE)
endfunction()

# Rewrites the include folders of `target` and of every imported target it links, recursively.
function(_u3d_shadow_target target)
  if(NOT TARGET ${target})
    return()
  endif()
  get_property(_done GLOBAL PROPERTY _u3d_shadowed_${target})
  if(_done)
    return()
  endif()
  set_property(GLOBAL PROPERTY _u3d_shadowed_${target} TRUE)
  get_target_property(_inc ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(_inc)
    set(_new)
    foreach(_dir IN LISTS _inc)
      if(EXISTS "${_dir}/fmt")
        _u3d_shadow_dir("${_dir}" _dir)
      endif()
      list(APPEND _new "${_dir}")
    endforeach()
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_new}")
  endif()
  get_target_property(_links ${target} INTERFACE_LINK_LIBRARIES)
  if(_links)
    foreach(_lib IN LISTS _links)
      if(TARGET ${_lib})
        _u3d_shadow_target(${_lib})
      endif()
    endforeach()
  endif()
endfunction()

get_property(_u3d_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
foreach(_lib IN LISTS TORCH_LIBRARIES _u3d_imported)
  _u3d_shadow_target(${_lib})
endforeach()

set(U3D_HAVE_CUDA_TORCH OFF)
if(TARGET torch_cuda OR TARGET c10_cuda)
  set(U3D_HAVE_CUDA_TORCH ON)
endif()
