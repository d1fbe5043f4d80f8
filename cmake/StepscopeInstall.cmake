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
configure_package_config_file(cmake/stepscopeConfig.cmake.in
  "${PROJECT_BINARY_DIR}/stepscopeConfig.cmake"
  INSTALL_DESTINATION ${STEPSCOPE_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/stepscopeConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/stepscopeConfig.cmake" "${PROJECT_BINARY_DIR}/stepscopeConfigVersion.cmake"
  DESTINATION ${STEPSCOPE_CMAKE_DIR})

# pkg-config: the static library needs its private dependencies at link time.
set(STEPSCOPE_PC_REQUIRES_PRIVATE "fmt zlib")
configure_file(cmake/stepscope.pc.in "${PROJECT_BINARY_DIR}/stepscope.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/stepscope.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
