# What makes the release build relocatable, so scripts/bundle.sh can ship the very binaries the
# build made (no second build):
# - no path of the build machine in any binary: __FILE__ (assert and log messages, GoogleTest
#   failure lines, LibTorch's TORCH_CHECK inside its headers) is mapped to a relative name;
# - `cmake --install` lays out libexec/trainer and libexec/tests/*, and rewrites their RUNPATH from
#   the build tree's (the LibTorch folder) to $ORIGIN-relative lib/ (U3D_INSTALL_RPATH below).
#   The build-tree binaries keep finding LibTorch where they were linked.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  # GCC and Clang try the last matching map first: the most specific folder comes last.
  set(_u3d_maps "${CMAKE_SOURCE_DIR}/=")
  if(TORCH_INSTALL_PREFIX)
    get_filename_component(_u3d_torch_root "${TORCH_INSTALL_PREFIX}" REALPATH)
    list(APPEND _u3d_maps "${_u3d_torch_root}/=torch/")
    if(NOT _u3d_torch_root STREQUAL TORCH_INSTALL_PREFIX)
      list(APPEND _u3d_maps "${TORCH_INSTALL_PREFIX}/=torch/")
    endif()
  endif()
  list(APPEND _u3d_maps "${CMAKE_BINARY_DIR}/=build/")
  foreach(_m IN LISTS _u3d_maps)
    add_compile_options("-ffile-prefix-map=${_m}")
  endforeach()
endif()

# RUNPATH of installed executables: bin-like folders one level below the bundle root find lib/.
set(U3D_INSTALL_RPATH "$ORIGIN/../lib")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH OFF)
