# The CUDA backend's on/off decision (STEPSCOPE_CUDA = AUTO, ON, OFF), kept
# apart from find_package so that tests/cuda/cuda_decision_test.cmake can feed
# it any toolkit (a CUDA 12 one, none) without that toolkit installed (C15).
#
# stepscope_normalise_cuda_mode(<raw> <out_var>): AUTO, ON or OFF (1/TRUE/YES/Y
# and 0/FALSE/NO/N accepted); anything else is a configure error.
#
# stepscope_cuda_decision(<mode> <found> <version> <have_libraries> <out_var>):
# sets <out_var> to ON or OFF with one status line saying why, or stops the
# configure with one error when <mode> is ON and the toolkit cannot be used.
#   <found>          CUDAToolkit_FOUND
#   <version>        CUDAToolkit_VERSION (e.g. 12.8.93)
#   <have_libraries> true when the CUDA::cudart and CUDA::cupti targets exist
# The backend uses CUDA 13 identifiers (CUPTI's __cudaLaunchKernel_v13000
# callback ids, cudaStreamGetDevice): an older toolkit under AUTO leaves it
# off instead of breaking the build.
include_guard(GLOBAL)

set(STEPSCOPE_CUDA_MIN_VERSION 13)

function(stepscope_normalise_cuda_mode raw out_var)
  string(TOUPPER "${raw}" mode)
  if(mode MATCHES "^(1|TRUE|YES|Y)$")
    set(mode ON)
  elseif(mode MATCHES "^(0|FALSE|NO|N)$")
    set(mode OFF)
  elseif(NOT mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "STEPSCOPE_CUDA must be AUTO, ON or OFF (got '${raw}')")
  endif()
  set(${out_var} ${mode} PARENT_SCOPE)
endfunction()

function(stepscope_cuda_decision mode found version have_libraries out_var)
  set(decision OFF)
  if(mode STREQUAL "OFF")
    message(STATUS "stepscope: CUDA backend OFF (STEPSCOPE_CUDA=OFF)")
  elseif(found AND version VERSION_LESS STEPSCOPE_CUDA_MIN_VERSION)
    if(mode STREQUAL "ON")
      message(FATAL_ERROR "STEPSCOPE_CUDA=ON needs the CUDA ${STEPSCOPE_CUDA_MIN_VERSION} toolkit or newer "
                          "(found ${version}); use STEPSCOPE_CUDA=AUTO/OFF or point CUDAToolkit_ROOT at CUDA 13")
    endif()
    message(STATUS "stepscope: CUDA toolkit ${version} is older than ${STEPSCOPE_CUDA_MIN_VERSION}, CUDA backend OFF")
  elseif(found AND have_libraries)
    set(decision ON)
    message(STATUS "stepscope: CUDA backend ON (toolkit ${version})")
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "STEPSCOPE_CUDA=ON but the CUDA toolkit with CUPTI was not found "
                        "(set CUDAToolkit_ROOT, or use STEPSCOPE_CUDA=AUTO/OFF)")
  else()
    message(STATUS "stepscope: CUDA toolkit (with CUPTI) not found, CUDA backend OFF")
  endif()
  set(${out_var} ${decision} PARENT_SCOPE)
endfunction()
