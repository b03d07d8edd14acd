# ccache in front of the compiler. Precompiled headers need the pch sloppiness flags, or ccache
# refuses to cache any translation unit that includes the PCH.
if(U3D_USE_CCACHE)
  find_program(U3D_CCACHE_PROGRAM ccache)
  if(U3D_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER
        ${CMAKE_COMMAND} -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
        ${U3D_CCACHE_PROGRAM})
    message(STATUS "u3d: compiling through ${U3D_CCACHE_PROGRAM}")
  endif()
endif()
