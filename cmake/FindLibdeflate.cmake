# Finds libdeflate (https://github.com/ebiggers/libdeflate), the whole-buffer
# DEFLATE/gzip library, and defines the imported target Libdeflate::Libdeflate.
# libdeflate 1.15 and later install a CMake package of their own; older ones
# (Debian 12 has 1.14) only a pkg-config file, so this looks for the header
# and the library directly, which works for both.
#
#   find_package(Libdeflate)   ->  Libdeflate_FOUND, Libdeflate::Libdeflate
find_path(LIBDEFLATE_INCLUDE_DIR NAMES libdeflate.h)
find_library(LIBDEFLATE_LIBRARY NAMES deflate libdeflate)
mark_as_advanced(LIBDEFLATE_INCLUDE_DIR LIBDEFLATE_LIBRARY)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libdeflate REQUIRED_VARS LIBDEFLATE_LIBRARY LIBDEFLATE_INCLUDE_DIR)

if(Libdeflate_FOUND AND NOT TARGET Libdeflate::Libdeflate)
  add_library(Libdeflate::Libdeflate UNKNOWN IMPORTED)
  set_target_properties(Libdeflate::Libdeflate PROPERTIES
    IMPORTED_LOCATION "${LIBDEFLATE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LIBDEFLATE_INCLUDE_DIR}")
endif()
