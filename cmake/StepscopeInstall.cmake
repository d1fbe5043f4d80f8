# Install rules and the package files for find_package(stepscope CONFIG) and
# pkg-config.

include(CMakePackageConfigHelpers)

install(TARGETS stepscope EXPORT stepscopeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/stepscope DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${PROJECT_BINARY_DIR}/generated/include/stepscope/version.hpp"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/stepscope)

set(STEPSCOPE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stepscope)
install(EXPORT stepscopeTargets NAMESPACE stepscope:: DESTINATION ${STEPSCOPE_CMAKE_DIR})

# The optional MPI component (src/mpi), in its own export set so that
# find_package(stepscope) needs MPI only when a consumer asks for it:
# find_package(stepscope CONFIG REQUIRED COMPONENTS mpi) -> stepscope::mpi.
set(STEPSCOPE_HAVE_MPI OFF)
if(TARGET stepscope_mpi)
  set(STEPSCOPE_HAVE_MPI ON)
  install(TARGETS stepscope_mpi EXPORT stepscopeMpiTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT stepscopeMpiTargets NAMESPACE stepscope:: DESTINATION ${STEPSCOPE_CMAKE_DIR})
endif()
configure_package_config_file(cmake/stepscopeConfig.cmake.in
  "${PROJECT_BINARY_DIR}/stepscopeConfig.cmake"
  INSTALL_DESTINATION ${STEPSCOPE_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/stepscopeConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/stepscopeConfig.cmake" "${PROJECT_BINARY_DIR}/stepscopeConfigVersion.cmake"
  DESTINATION ${STEPSCOPE_CMAKE_DIR})
if(STEPSCOPE_WITH_LIBDEFLATE AND NOT BUILD_SHARED_LIBS)
  # The static library needs it at link time; the config re-finds it with this module.
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/FindLibdeflate.cmake" DESTINATION ${STEPSCOPE_CMAKE_DIR})
endif()

# pkg-config. A static libstepscope.a needs its dependencies at link time, so
# they go in Requires/Libs (not .private): a plain `pkg-config --libs stepscope`
# must link (tests/package checks it). The prefix is found from the .pc file's
# own location, so `cmake --install --prefix DIR` (any DIR) gives a working file.
set(_pc_deps "fmt zlib")
if(STEPSCOPE_WITH_LIBDEFLATE)
  string(APPEND _pc_deps " libdeflate")
endif()
if(BUILD_SHARED_LIBS)
  set(STEPSCOPE_PC_REQUIRES "")
  set(STEPSCOPE_PC_REQUIRES_PRIVATE "${_pc_deps}")
  set(STEPSCOPE_PC_CFLAGS_EXTRA "")
  set(STEPSCOPE_PC_LIBS_EXTRA "")
else()
  set(STEPSCOPE_PC_REQUIRES "${_pc_deps}")
  set(STEPSCOPE_PC_REQUIRES_PRIVATE "")
  set(STEPSCOPE_PC_CFLAGS_EXTRA "-DSTEPSCOPE_STATIC_DEFINE")
  set(STEPSCOPE_PC_LIBS_EXTRA "")
  if(CMAKE_DL_LIBS)
    set(STEPSCOPE_PC_LIBS_EXTRA "-l${CMAKE_DL_LIBS}")
  endif()
  if(STEPSCOPE_WITH_CUDA)
    # What src/cuda links (CUDA::cudart, CUDA::cupti), from the toolkit found at build time.
    set(_dirs)
    set(_libs)
    foreach(_lib cudart cupti)
      if(TARGET CUDA::${_lib})
        get_target_property(_location CUDA::${_lib} LOCATION)
        get_filename_component(_dir "${_location}" DIRECTORY)
        list(APPEND _dirs "${_dir}")
        list(APPEND _libs "-l${_lib}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES _dirs)
    foreach(_dir IN LISTS _dirs)
      string(APPEND STEPSCOPE_PC_LIBS_EXTRA " -L${_dir} -Wl,-rpath,${_dir}")
    endforeach()
    list(JOIN _libs " " _libs)
    string(APPEND STEPSCOPE_PC_LIBS_EXTRA " ${_libs}")
  endif()
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(STEPSCOPE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(STEPSCOPE_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(STEPSCOPE_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(STEPSCOPE_PC_PREFIX "\${pcfiledir}/${_up}")
  set(STEPSCOPE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(STEPSCOPE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/stepscope.pc.in "${PROJECT_BINARY_DIR}/stepscope.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/stepscope.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
