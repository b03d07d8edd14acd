# Debian packages: libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev libhdf5-dev (scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)

# yaml-cpp 0.7 exports the plain target `yaml-cpp`; newer releases add `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  set(U3D_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(U3D_YAML_TARGET yaml-cpp)
endif()

add_library(u3d_hdf5 INTERFACE)
target_include_directories(u3d_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(u3d_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
# zlib: src/data/h5.cpp inflates raw HDF5 chunks itself, in the reading threads.
find_package(ZLIB REQUIRED)
target_link_libraries(u3d_hdf5 INTERFACE ZLIB::ZLIB)
target_compile_definitions(u3d_hdf5 INTERFACE ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})
