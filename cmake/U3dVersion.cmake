# The git commit is re-read at every build (not only at configure time) so a checkpoint always
# names the commit that produced the binary. The generated file changes only when the commit does.
set(U3D_VERSION_CPP "${CMAKE_BINARY_DIR}/generated/version_info.cpp")
add_custom_target(u3d_version_info
  COMMAND ${CMAKE_COMMAND}
          -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
          -DOUTPUT=${U3D_VERSION_CPP}
          -DVERSION=${PROJECT_VERSION}
          -P ${CMAKE_SOURCE_DIR}/cmake/write_version.cmake
  BYPRODUCTS ${U3D_VERSION_CPP}
  COMMENT "u3d: reading the git commit"
  VERBATIM)
