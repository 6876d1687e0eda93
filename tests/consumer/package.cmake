# SPDX-License-Identifier: BSD-3-Clause
# cmake -DCPACK=<cpack> -DBUILD_DIR=<modhooks build> -DOUT=<folder> -P package.cmake: builds the
# Debian package of the install with CPack, checks its control fields and unpacks it into
# <folder>/root, where the consumer tests find <folder>/root/usr as an install prefix.
execute_process(COMMAND "${CPACK}" -G DEB --config "${BUILD_DIR}/CPackConfig.cmake" -B "${OUT}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cpack -G DEB failed (${rc}):\n${out}")
endif()
file(GLOB debs "${OUT}/libmodhooks-dev_*.deb")
list(LENGTH debs n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one libmodhooks-dev_*.deb in ${OUT}, found ${n}:\n${out}")
endif()
execute_process(COMMAND dpkg-deb --field "${debs}" Package Version Depends
  RESULT_VARIABLE rc OUTPUT_VARIABLE fields ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT fields MATCHES "Package: libmodhooks-dev"
   OR NOT fields MATCHES "Depends: libdeflate-dev")
  message(FATAL_ERROR "unexpected control fields of ${debs}:\n${fields}${err}")
endif()
execute_process(COMMAND dpkg-deb -x "${debs}" "${OUT}/root" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dpkg-deb -x ${debs} failed: ${err}")
endif()
file(GLOB_RECURSE configs "${OUT}/root/usr/*/modhooksConfig.cmake")
if(NOT configs)
  message(FATAL_ERROR "${debs} has no modhooksConfig.cmake under /usr")
endif()
message(STATUS "${debs}:\n${fields}")
