# Debian packages: libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev libhdf5-dev libnifti2-dev
# libtiff-dev libpng-dev (scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 (core/sha256.cpp)
find_package(nlohmann_json 3.11 REQUIRED)  # every JSON file we read or write (header-only)
find_package(TIFF REQUIRED)  # 3D TIFF volumes (io/tiff/tiff.cpp, `trainer import tiff`): TIFF::TIFF
find_package(PNG REQUIRED)  # 2D PNG slices (io/images/image2d.cpp, `trainer import images`): PNG::PNG

# yaml-cpp 0.7 exports the plain target `yaml-cpp`; newer releases add `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  set(U3D_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(U3D_YAML_TARGET yaml-cpp)
endif()

add_library(u3d_hdf5 INTERFACE)
target_include_directories(u3d_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(u3d_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
# zlib: src/io/h5/h5.cpp inflates raw HDF5 chunks itself, in the reading threads.
find_package(ZLIB REQUIRED)
target_link_libraries(u3d_hdf5 INTERFACE ZLIB::ZLIB)
target_compile_definitions(u3d_hdf5 INTERFACE ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})

# NIfTI-1/-2 (nifticlib 3, Debian libnifti2-dev): nifti2_io.h, libnifti2 + libznz (gzip through zlib).
# Debian's /usr/share/cmake/NIFTI config points at /usr/lib instead of the multiarch folder and
# lists tools the package does not ship, so the headers and libraries are found directly.
find_package(ZLIB REQUIRED)
find_path(U3D_NIFTI_INCLUDE_DIR nifti2_io.h PATH_SUFFIXES nifti REQUIRED)
find_library(U3D_NIFTI2_LIBRARY nifti2 REQUIRED)
find_library(U3D_ZNZ_LIBRARY znz REQUIRED)
add_library(u3d_nifti INTERFACE)
target_include_directories(u3d_nifti SYSTEM INTERFACE ${U3D_NIFTI_INCLUDE_DIR})
target_link_libraries(u3d_nifti INTERFACE ${U3D_NIFTI2_LIBRARY} ${U3D_ZNZ_LIBRARY} ZLIB::ZLIB m)
target_compile_definitions(u3d_nifti INTERFACE HAVE_ZLIB)

# Plots (src/train/progress_plot.cpp): Cairo draws progress.png/.svg (libcairo2-dev, fonts from
# fonts-dejavu-core); the tests decode the PNGs with libpng (libpng-dev).
find_package(PkgConfig REQUIRED)
pkg_check_modules(U3D_CAIRO REQUIRED IMPORTED_TARGET cairo)
pkg_check_modules(U3D_PNG REQUIRED IMPORTED_TARGET libpng)

# DICOM and DICOM-RT (src/io/dicom*.cpp, `trainer import dicom`): DCMTK (Debian libdcmtk-dev 3.6.7):
# dcmdata reads the files, dcmjpeg / dcmjpls / dcmdata's RLE codec decode compressed pixel data.
# Linked privately: DCMTK's headers are included by src/io/dicom*.cpp (through src/io/dicom/dicom_detail.h) alone.
find_package(DCMTK CONFIG REQUIRED)
add_library(u3d_dcmtk INTERFACE)
target_link_libraries(u3d_dcmtk INTERFACE DCMTK::dcmdata DCMTK::dcmjpeg DCMTK::dcmjpls DCMTK::oflog DCMTK::ofstd)
# JPEG 2000 and HTJ2K pixel data (src/io/dicom_j2k.cpp), which DCMTK 3.6.7 cannot decode: OpenJPEG
# (Debian libopenjp2-7-dev 2.5: its HT decoder reads HTJ2K too), found through libopenjp2.pc as Cairo is.
pkg_check_modules(U3D_OPENJP2 REQUIRED IMPORTED_TARGET libopenjp2>=2.5)
target_link_libraries(u3d_dcmtk INTERFACE PkgConfig::U3D_OPENJP2)
# DCMTK reads its data dictionary from a file (DCM_DICT_DEFAULT 2): the bundle carries Debian's copy,
# which src/io/dicom/dicom.cpp loads from <prefix>/share/unet3d-trainer/ when no system one is found.
find_file(U3D_DCMTK_DICT dicom.dic PATHS /usr/share/libdcmtk17 /usr/share/dcmtk PATH_SUFFIXES dcmtk NO_DEFAULT_PATH)
if(U3D_DCMTK_DICT)
  install(FILES ${U3D_DCMTK_DICT} DESTINATION share/unet3d-trainer COMPONENT bundle)
endif()
