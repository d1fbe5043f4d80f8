# The configure's CUDA decision for toolkits this machine does not have
# (review C15): a CUDA 12 toolkit under STEPSCOPE_CUDA=AUTO turns the backend
# off with one clear status line (the backend uses CUDA 13 identifiers and
# would not compile); under ON the configure fails with one clear error;
# CUDA 13 turns it on. Each case runs cuda_decision_case.cmake in its own
# `cmake -P` (a FATAL_ERROR ends the process that raises it).
#   cmake -DSOURCE_DIR=<repo> -P cuda_decision_test.cmake
set(module "${SOURCE_DIR}/cmake/StepscopeCuda.cmake")
set(case_script "${SOURCE_DIR}/tests/cuda/cuda_decision_case.cmake")
set(failures 0)

# expect: ON, OFF or ERROR; needle: text the output must contain (once).
function(check_case name mode found version libraries expect needle)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -DMODULE=${module} -DMODE=${mode} -DFOUND=${found} -DVERSION=${version}
            -DLIBRARIES=${libraries} -P "${case_script}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(text "${out}${err}")
  set(ok TRUE)
  if(expect STREQUAL "ERROR")
    if(rc EQUAL 0 OR text MATCHES "decision=")
      set(ok FALSE)
    endif()
  elseif(NOT rc EQUAL 0 OR NOT text MATCHES "decision=${expect}\n")
    set(ok FALSE)
  endif()
  string(FIND "${text}" "${needle}" first)
  string(FIND "${text}" "${needle}" last REVERSE)
  if(first EQUAL -1 OR NOT first EQUAL last)
    set(ok FALSE)  # missing, or said more than once
  endif()
  if(ok)
    message(STATUS "ok: ${name}")
  else()
    message(STATUS "FAILED: ${name} (rc ${rc}, expected ${expect} and once '${needle}'):\n${text}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  endif()
endfunction()

check_case("CUDA 12.8 under AUTO: backend off, one status line" AUTO ON 12.8.93 ON OFF
           "CUDA toolkit 12.8.93 is older than 13, CUDA backend OFF")
check_case("CUDA 12.8 under ON: configure fails clearly" ON ON 12.8.93 ON ERROR
           "STEPSCOPE_CUDA=ON needs the CUDA 13 toolkit or newer (found 12.8.93)")
check_case("CUDA 12.8 under ON spelled 1" 1 ON 12.8.93 ON ERROR "needs the CUDA 13 toolkit or newer")
check_case("CUDA 13.0 under AUTO: backend on" AUTO ON 13.0.48 ON ON "CUDA backend ON (toolkit 13.0.48)")
check_case("CUDA 13 without CUPTI under AUTO: off" AUTO ON 13.0.48 OFF OFF "not found, CUDA backend OFF")
check_case("no toolkit under AUTO: off" AUTO OFF "" OFF OFF "CUDA toolkit (with CUPTI) not found")
check_case("no toolkit under ON: configure fails" ON OFF "" OFF ERROR "STEPSCOPE_CUDA=ON but the CUDA toolkit")
check_case("OFF never looks" OFF ON 13.0.48 ON OFF "CUDA backend OFF (STEPSCOPE_CUDA=OFF)")
check_case("a bad mode is an error" MAYBE ON 13.0.48 ON ERROR "STEPSCOPE_CUDA must be AUTO, ON or OFF")

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} CUDA decision case(s) failed")
endif()
