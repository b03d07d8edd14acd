# The project's own CUDA kernels (src/kernels/*.cu): compiled whenever a CUDA compiler and a CUDA
# build of LibTorch are found (U3dTorch.cmake finds nvcc: the system's, or PyPI's in the torch venv),
# GPU or not, so the CPU-only CI machine builds and ships them in the bundle and the wheel.
# Architectures: sm_80 (A100), sm_90 (H100, H200), sm_100 (B200) as machine code, plus compute_100
# PTX for what comes after. -DU3D_CUDA_KERNELS=OFF builds without them (the CPU path is unchanged).
option(U3D_CUDA_KERNELS "Compile the project's CUDA kernels (kernels/) when nvcc and a CUDA LibTorch are found" ON)
set(U3D_BUILD_CUDA_KERNELS OFF)
set(U3D_CUDA_KERNEL_ARCHITECTURES "")
if(U3D_CUDA_KERNELS AND TARGET torch_cuda AND CMAKE_CUDA_COMPILER)
  get_property(_u3d_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST _u3d_languages)
    enable_language(CUDA)
  endif()
  set(U3D_BUILD_CUDA_KERNELS ON)
  if(U3D_CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${U3D_CCACHE_PROGRAM})
  endif()
  set(U3D_CUDA_KERNEL_ARCHS "80-real;90-real;100")  # 100: sm_100 machine code and compute_100 PTX
  # Caffe2's cuda.cmake appends -gencode flags for its own architecture list to CMAKE_CUDA_FLAGS
  # (compute_50 among them, which CUDA 13 refuses); our kernels take CUDA_ARCHITECTURES only.
  string(REGEX REPLACE "-gencode[ =]arch=[^ ]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  set(U3D_CUDA_KERNEL_ARCHITECTURES "sm_80 sm_90 sm_100 + compute_100 PTX")
  message(STATUS "u3d: CUDA kernels (kernels/) for ${U3D_CUDA_KERNEL_ARCHITECTURES} with ${CMAKE_CUDA_COMPILER}")
else()
  set(_u3d_why "U3D_CUDA_KERNELS is OFF")
  if(U3D_CUDA_KERNELS AND NOT TARGET torch_cuda)
    set(_u3d_why "LibTorch is a CPU build")
  elseif(U3D_CUDA_KERNELS)
    set(_u3d_why "no CUDA compiler")
  endif()
  message(STATUS "u3d: no CUDA kernels (kernels/): ${_u3d_why}")
endif()

# cuDNN's graph API (kernels/cudnn_norm_act.h, timed by `trainer bench-norm` beside our kernels):
# NVIDIA's header-only cudnn-frontend (scripts/setup.sh installs its PyPI wheel's include/ into the
# torch venv's site-packages) over the cudnn.h of torch's nvidia-cudnn wheel. Compiled with the
# frontend's dynamic loading: cuDNN's symbols are looked up at run time in the libcudnn.so.9 torch has
# already loaded, so nothing links against cuDNN. Without the headers that column says "not built".
set(U3D_BUILD_CUDNN_GRAPHS OFF)
if(U3D_BUILD_CUDA_KERNELS)
  get_filename_component(_u3d_site_packages "${Torch_DIR}/../../../.." ABSOLUTE)
  find_path(U3D_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
            HINTS "${_u3d_site_packages}/include" "${U3D_TORCH_VENV}/include" NO_DEFAULT_PATH)
  find_path(U3D_CUDNN_INCLUDE_DIR cudnn.h HINTS "${_u3d_site_packages}/nvidia/cudnn/include")
  if(U3D_CUDNN_FRONTEND_INCLUDE_DIR AND U3D_CUDNN_INCLUDE_DIR)
    set(U3D_BUILD_CUDNN_GRAPHS ON)
    message(STATUS "u3d: cuDNN graphs (cudnn-frontend ${U3D_CUDNN_FRONTEND_INCLUDE_DIR}, cudnn.h ${U3D_CUDNN_INCLUDE_DIR})")
  else()
    message(STATUS "u3d: no cuDNN graphs (bench-norm's cuDNN column): cudnn_frontend.h or cudnn.h not found")
  endif()
endif()
