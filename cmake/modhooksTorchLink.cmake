# SPDX-License-Identifier: BSD-3-Clause
# libtorch from the PyPI wheel finds its CUDA libraries (NCCL, cuDNN, ...) through an RPATH into
# site-packages/nvidia. The linker does not follow it, and a system CUDA toolkit's older copies
# win instead ("undefined reference to ncclSignal"). Point the linker at the wheel's copies.
function(modhooks_fix_torch_link target)
  # TorchConfig.cmake sets TORCH_INSTALL_PREFIX; the wheel's is site-packages/torch.
  file(GLOB _nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  if(NOT _nvidia_libs)
    return()
  endif()
  list(JOIN _nvidia_libs ":" _joined)
  get_target_property(_imported ${target} IMPORTED)
  if(_imported)
    target_link_options(${target} INTERFACE "LINKER:-rpath-link,${_joined}")
  else()
    # The installed config adds its own; the build tree's path must not be exported.
    target_link_options(${target} INTERFACE "$<BUILD_INTERFACE:LINKER:-rpath-link,${_joined}>")
  endif()
endfunction()
