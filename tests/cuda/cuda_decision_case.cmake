# One case of cuda_decision_test.cmake: runs the configure's CUDA decision
# (cmake/StepscopeCuda.cmake) on a toolkit described by -D values, without
# that toolkit installed. Prints "decision=ON|OFF"; an error stops it.
#   cmake -DMODULE=<cmake/StepscopeCuda.cmake> -DMODE=AUTO -DFOUND=ON -DVERSION=12.8.93 -DLIBRARIES=ON -P this
include("${MODULE}")
stepscope_normalise_cuda_mode("${MODE}" mode)
stepscope_cuda_decision("${mode}" "${FOUND}" "${VERSION}" "${LIBRARIES}" decision)
message(STATUS "decision=${decision}")
