# The package tests (tests/package/CMakeLists.txt), run with cmake -P:
#   -DMODE=install|find_package|add_subdirectory|pkg_config
#   -DBUILD_DIR=<stepscope build> -DSOURCE_DIR=<stepscope source> -DWORK=<scratch dir>
#   -DGENERATOR=... -DCXX=... [-DLAUNCHER=ccache] [-DEXPECT_MPI=ON: stepscope::mpi too]
# The install prefix is ${WORK}/prefix, shared by the modes that need it
# (CTest fixture: install runs first).
cmake_minimum_required(VERSION 3.16)

set(prefix "${WORK}/prefix")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# Runs the consumer app in a scratch directory; it checks its own report.
function(run_app app dir)
  file(REMOVE_RECURSE "${dir}/run")
  file(MAKE_DIRECTORY "${dir}/run")
  # (Open MPI refuses root without the two OMPI_ variables; CI runs as root.)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env STEPSCOPE_QUIET=1 "STEPSCOPE_OUT=${dir}/run/report.json"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "${app}"
    WORKING_DIRECTORY "${dir}/run" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${dir}/run/report.json")
    message(FATAL_ERROR "the consumer app failed (${rc}):\n${out}\n${err}")
  endif()
  file(READ "${dir}/run/report.json" report)
  if(NOT report MATCHES "\"schema_version\"")
    message(FATAL_ERROR "the consumer's report has no schema_version")
  endif()
  message(STATUS "${out}")
endfunction()

set(launcher_args)
if(LAUNCHER)
  set(launcher_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
endif()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${prefix}")
  run_step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
  foreach(f include/stepscope/stepscope.hpp include/stepscope/version.hpp include/stepscope/html.hpp bin/stepscope)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()
  # The installed headers are the product's API and nothing else
  # (docs/architecture.md, "The installed API"): a header added to
  # include/stepscope/ fails here until it is added to this list on purpose;
  # one only the project uses belongs in its src/ layer.
  set(allowed analysis.hpp clock.hpp cuda.hpp export.hpp html.hpp import.hpp merge.hpp mpi.hpp phase.hpp
    report.hpp ring.hpp site.hpp steps.hpp stepscope.hpp version.hpp)
  file(GLOB_RECURSE installed RELATIVE "${prefix}/include/stepscope" "${prefix}/include/stepscope/*")
  list(SORT installed)
  list(SORT allowed)
  if(NOT installed STREQUAL allowed)
    set(extra ${installed})
    list(REMOVE_ITEM extra ${allowed})
    set(missing ${allowed})
    list(REMOVE_ITEM missing ${installed})
    message(FATAL_ERROR "installed headers differ from the allowed list: not allowed: [${extra}]; "
                        "missing: [${missing}]")
  endif()
  file(GLOB_RECURSE configs "${prefix}/*/stepscopeConfig.cmake")
  file(GLOB_RECURSE pcs "${prefix}/*/stepscope.pc")
  if(NOT configs OR NOT pcs)
    message(FATAL_ERROR "no stepscopeConfig.cmake or stepscope.pc under ${prefix}")
  endif()
  run_step("installed stepscope --version" "${prefix}/bin/stepscope" --version)
  message(STATUS "installed into ${prefix}: ${step_output}")

elseif(MODE STREQUAL "find_package" OR MODE STREQUAL "add_subdirectory")
  set(dir "${WORK}/${MODE}")
  file(REMOVE_RECURSE "${dir}")
  # -O0 without debug info: add_subdirectory compiles the whole library, and
  # what is tested here is the CMake wiring, not the optimiser (2 shared cores).
  set(args -S "${SOURCE_DIR}/tests/package/consumer" -B "${dir}" -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX}"
    -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O0 -g0" "-DSTEPSCOPE_CONSUME=${MODE}"
    "-DSTEPSCOPE_EXPECT_MPI=${EXPECT_MPI}" ${launcher_args})
  if(MODE STREQUAL "find_package")
    list(APPEND args "-DCMAKE_PREFIX_PATH=${prefix}")
  else()
    # Nothing installed may leak in: the source tree alone must do.
    list(APPEND args "-DSTEPSCOPE_SOURCE=${SOURCE_DIR}" -DCMAKE_DISABLE_FIND_PACKAGE_stepscope=ON)
  endif()
  run_step("configuring the consumer (${MODE})" "${CMAKE_COMMAND}" ${args})
  run_step("building the consumer (${MODE})" "${CMAKE_COMMAND}" --build "${dir}" --parallel 2)
  run_app("${dir}/app" "${dir}")
  run_step("the API consumer (every installed header)" "${dir}/api")
  message(STATUS "${step_output}")
  if(EXPECT_MPI)
    # One rank, started without mpirun (an MPI singleton).
    run_app("${dir}/mpi_app" "${dir}")
  endif()

elseif(MODE STREQUAL "pkg_config")
  find_program(PKG_CONFIG pkg-config)
  if(NOT PKG_CONFIG)
    message(STATUS "SKIPPED: pkg-config not found")
    return()
  endif()
  file(GLOB_RECURSE pcs "${prefix}/*/stepscope.pc")
  list(GET pcs 0 pc)
  get_filename_component(pc_dir "${pc}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  run_step("pkg-config --cflags --libs stepscope" "${PKG_CONFIG}" --cflags --libs stepscope)
  string(STRIP "${step_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  message(STATUS "pkg-config: ${flags}")
  set(dir "${WORK}/pkg_config")
  file(REMOVE_RECURSE "${dir}")
  file(MAKE_DIRECTORY "${dir}")
  run_step("compiling and linking with the pkg-config flags" "${CXX}" -std=c++17 -O1 "${SOURCE_DIR}/tests/package/consumer/main.cpp"
    -o "${dir}/app" ${flags})
  run_app("${dir}/app" "${dir}")

else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
