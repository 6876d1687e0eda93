# SPDX-License-Identifier: BSD-3-Clause
# cmake -DBUILD_DIR=... -DTARGET=... -DEXPECT=<regex> -P check.cmake: passes only when building
# TARGET fails and the compiler's output matches EXPECT (fmt's compile-error-test pattern). With
# EXPECT empty, the build must succeed (the control case).
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TARGET} must compile but failed:\n${out}")
  endif()
  message(STATUS "${TARGET} compiles, as it must")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but a hook with this signature must be rejected")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${TARGET} failed to compile without saying why (no match for "
    "\"${EXPECT}\"):\n${out}")
endif()
message(STATUS "${TARGET} is rejected: ${CMAKE_MATCH_0}")
