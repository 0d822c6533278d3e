# Runs an MPI job that must fail: a non-zero exit within TIMEOUT seconds and
# output matching EXPECT. Used by the RuntimeMPI.* failure tests.
#   cmake -DMPIEXEC=... -DNP=32 -DDRIVER=... -DMODE=exit -DEXPECT=regex
#         -DTIMEOUT=120 -P ExpectMPIFailure.cmake
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${NP}
          ${DRIVER} ${MODE}
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
  message(FATAL_ERROR "the MPI job '${MODE}' succeeded, but it must fail")
endif()
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the MPI job '${MODE}' did not end within ${TIMEOUT} s")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output of '${MODE}' does not match '${EXPECT}'")
endif()
message(STATUS "'${MODE}' failed as expected (exit: ${rc})")
