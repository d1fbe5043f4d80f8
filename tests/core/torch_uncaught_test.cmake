# PyTorch's C++ MNIST loop (examples/libtorch/mnist_loop.cpp) whose batch 30
# has the wrong shape: the c10::Error from nll_loss escapes main, as it would in
# the original example. The program must still abort as without stepscope,
# and the final report must say how the run ended and why.
#   cmake -DEXE=<stepscope_torch_mnist_loop> -DDIR=<scratch directory> -P this
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")
set(ENV{STEPSCOPE_OUT} "${DIR}/report.json")
set(ENV{STEPSCOPE_SNAPSHOT_S} "0")
set(ENV{STEPSCOPE_QUIET} "0")
set(ENV{STEPSCOPE_CUDA} "0")
execute_process(COMMAND "${EXE}" --fail-at 30 --batches 60 --sample-us 0
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
# A child killed by SIGABRT: CMake says so in words, not with an exit status.
if(NOT rc MATCHES "abort|Abort")
  message(FATAL_ERROR "expected the program to abort, got '${rc}'\n${err}")
endif()
if(NOT EXISTS "${DIR}/report.json")
  message(FATAL_ERROR "no report\n${err}")
endif()
file(READ "${DIR}/report.json" report)
string(JSON ended_by GET "${report}" ended_by)
string(JSON complete GET "${report}" complete)
string(JSON type GET "${report}" exception type)
string(JSON message GET "${report}" exception message)
string(JSON count GET "${report}" steps count)
string(JSON warmup GET "${report}" steps warmup_excluded)
if(NOT ended_by STREQUAL "terminate" OR NOT complete)
  message(FATAL_ERROR "ended_by '${ended_by}', complete '${complete}'")
endif()
if(NOT type STREQUAL "c10::Error" OR NOT message MATCHES "^size mismatch \\(got input: ")
  message(FATAL_ERROR "exception '${type}': '${message}'")
endif()
math(EXPR steps "${count} + ${warmup}")
# Batches 0-29; the 31st was in flight: nothing unwinds before std::terminate, so it never ended.
if(NOT steps EQUAL 30)
  message(FATAL_ERROR "steps ${steps} (count ${count} + warm-up ${warmup}), expected 30")
endif()
if(NOT err MATCHES "run ended by std::terminate [0-9.]+ s into recording: uncaught exception c10::Error: ")
  message(FATAL_ERROR "the summary does not say how the run ended:\n${err}")
endif()
message(STATUS "aborted as without stepscope; report: ended_by ${ended_by}, ${type}: ${message}; ${steps} steps")
