# Runs a job of processes that must fail: a non-zero exit within TIMEOUT
# seconds and output matching EXPECT. Used by the RuntimeMPI.* and
# RuntimeTCP.* failure tests. LAUNCHER is the launch command before -np (a
# list), BACKEND the driver's backend.
#   cmake "-DLAUNCHER=mpiexec;--oversubscribe" -DNP=32 -DDRIVER=...
#         -DMODE=exit -DBACKEND=mpi -DEXPECT=regex -DTIMEOUT=120
#         -P ExpectLaunchFailure.cmake
execute_process(
  COMMAND ${LAUNCHER} -np ${NP} ${DRIVER} ${MODE} ${BACKEND}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT ${TIMEOUT})
set(all "${out}${err}")
string(LENGTH "${all}" len)
if(len GREATER 6000)
  string(SUBSTRING "${all}" 0 6000 shown)
else()
  set(shown "${all}")
endif()
message("${shown}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "the ${BACKEND} job '${MODE}' succeeded, but it must fail")
endif()
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the ${BACKEND} job '${MODE}' did not end within ${TIMEOUT} s")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output of '${MODE}' does not match '${EXPECT}'")
endif()
message(STATUS "'${MODE}' failed as expected (exit: ${rc})")
