# ZincInstall.cmake — what `cmake --install build [--prefix P]` puts where (docs/install.md):
#
#   include/zinc.h                        the public API, the whole of it
#   lib/libzinc.so.MAJOR.MINOR.PATCH      + libzinc.so.MAJOR (SONAME) + libzinc.so (link name)
#   lib/libzinc.a                         one relocatable object of all of zinc, only zinc_* global
#   lib/pkgconfig/zinc.pc                 pkg-config (`--static` lists the dependencies)
#   lib/cmake/zinc/                       find_package(zinc): zincConfig.cmake, zincConfigVersion.cmake,
#                                         zincTargets*.cmake with the imported target zinc::zinc
#   bin/zinc                              the CLI
#   share/zinc/configs/                   the example DeepSpeed configs
#
# lib is CMAKE_INSTALL_LIBDIR (GNUInstallDirs: lib/x86_64-linux-gnu when the prefix is /usr).
# zinc.pc finds its prefix from its own location, so an installed tree can be moved.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- libzinc.a: self-contained --------------------------------------------------------------
# The archive of zinc_core would put every internal symbol of zinc (short, unprefixed names) into
# the program's namespace. Instead all of zinc_core is linked into one relocatable object and its
# hidden symbols (everything that is not ZINC_API) are made local, so libzinc.a exports exactly
# what libzinc.so does. Its dependencies (json-c, zstd, xxhash, MPI, CUDA) stay shared libraries
# of the system, listed in zinc.pc for `pkg-config --static`.
set(ZINC_STATIC_OBJECT ${CMAKE_CURRENT_BINARY_DIR}/zinc_static.o)
set(ZINC_STATIC_LIB ${CMAKE_CURRENT_BINARY_DIR}/libzinc.a)
add_custom_command(OUTPUT ${ZINC_STATIC_LIB}
  COMMAND ${CMAKE_LINKER} -r -o ${ZINC_STATIC_OBJECT} --whole-archive $<TARGET_FILE:zinc_core>
  COMMAND ${CMAKE_OBJCOPY} --localize-hidden ${ZINC_STATIC_OBJECT}
  COMMAND ${CMAKE_COMMAND} -E remove -f ${ZINC_STATIC_LIB}
  COMMAND ${CMAKE_AR} qc ${ZINC_STATIC_LIB} ${ZINC_STATIC_OBJECT}
  COMMAND ${CMAKE_RANLIB} ${ZINC_STATIC_LIB}
  DEPENDS zinc_core
  COMMENT "Linking libzinc.a (one object, only zinc_* global)"
  VERBATIM)
add_custom_target(zinc_static ALL DEPENDS ${ZINC_STATIC_LIB})

# ---- what the installed library needs, for zinc.pc's Libs.private ---------------------------
# Full paths become -L<dir> -l<name>, so the .pc is readable and the linker picks the shared
# library of the same name.
function(zinc_pc_libs out)
  set(flags "")
  foreach(lib ${ARGN})
    if(lib MATCHES "^/.*/lib([^/]+)\\.(so|a)(\\..*)?$")
      get_filename_component(dir ${lib} DIRECTORY)
      list(APPEND flags "-L${dir}" "-l${CMAKE_MATCH_1}")
    elseif(lib MATCHES "^-")
      list(APPEND flags ${lib})
    elseif(lib)
      list(APPEND flags "-l${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  list(JOIN flags " " flags)
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

set(ZINC_PC_REQUIRES_PRIVATE "json-c libzstd libxxhash")
if(URING_FOUND)
  # the NVMe store's io_uring (engine/nvme_store.c), when the build found liburing
  string(APPEND ZINC_PC_REQUIRES_PRIVATE " liburing")
endif()
set(ZINC_PC_LIBS_LIST "")
if(ZINC_HAVE_MPI)
  list(APPEND ZINC_PC_LIBS_LIST ${MPI_C_LIBRARIES})
endif()
if(ZINC_HAVE_CUDA)
  # cudart/cuBLAS/NCCL as the shared libraries libzinc.so is linked with; nvcc compiles host
  # code as C++, so the C++ runtime is listed too (libzinc.so is linked by the C++ driver).
  list(APPEND ZINC_PC_LIBS_LIST ${CUDA_cudart_LIBRARY} ${CUDA_cublas_LIBRARY}
       ${CUDA_cublasLt_LIBRARY} ${NCCL_LIBRARY} stdc++)
endif()
list(APPEND ZINC_PC_LIBS_LIST m -pthread)
zinc_pc_libs(ZINC_PC_LIBS_PRIVATE ${ZINC_PC_LIBS_LIST})

# The prefix relative to the .pc file's folder (lib/pkgconfig -> ../..).
set(ZINC_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ZINC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH ZINC_PC_UP /p/${ZINC_PC_DIR} /p)
  string(REGEX REPLACE "/$" "" ZINC_PC_UP "${ZINC_PC_UP}")
  set(ZINC_PC_PREFIX "\${pcfiledir}/${ZINC_PC_UP}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/zinc.pc.in ${CMAKE_CURRENT_BINARY_DIR}/zinc.pc @ONLY)

# ---- install rules --------------------------------------------------------------------------
set_target_properties(zinc_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
target_include_directories(zinc INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/zinc.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS zinc EXPORT zincTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${ZINC_STATIC_LIB} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS zinc_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/configs/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zinc/configs FILES_MATCHING PATTERN "*.json")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/zinc.pc DESTINATION ${ZINC_PC_DIR})

set(ZINC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zinc)
install(EXPORT zincTargets NAMESPACE zinc:: DESTINATION ${ZINC_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/zincConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/zincConfig.cmake
                              INSTALL_DESTINATION ${ZINC_CMAKE_DIR})
# The SONAME promises ABI compatibility within a major version; so does the package version.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/zincConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/zincConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/zincConfigVersion.cmake
        DESTINATION ${ZINC_CMAKE_DIR})
