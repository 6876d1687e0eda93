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

# The directory (symlinks resolved) of an imported target's library file, or "" for none.
function(_modhooks_imported_dir target out)
  set(_dir "")
  if(TARGET ${target})
    get_target_property(_configs ${target} IMPORTED_CONFIGURATIONS)
    set(_props IMPORTED_LOCATION)
    if(_configs)
      foreach(_cfg IN LISTS _configs)
        string(TOUPPER "${_cfg}" _cfg)
        list(APPEND _props IMPORTED_LOCATION_${_cfg})
      endforeach()
    endif()
    foreach(_prop IN LISTS _props)
      get_target_property(_loc ${target} ${_prop})
      if(_loc)
        get_filename_component(_loc "${_loc}" REALPATH)
        get_filename_component(_dir "${_loc}" DIRECTORY)
        break()
      endif()
    endforeach()
  endif()
  set(${out} "${_dir}" PARENT_SCOPE)
endfunction()

# One libtorch, always. TorchConfig.cmake takes its `torch` and `c10` targets from the package it
# belongs to, but adds libc10 to TORCH_LIBRARIES (and sets TORCH_LIBRARY) with find_library,
# which searches the system's folders before the package's own. With the PyPI wheel found
# through torch.utils.cmake_prefix_path (site-packages/torch/share/cmake) and Debian's
# libtorch-dev in /usr, TORCH_LIBRARIES names Debian's libc10 beside the wheel's libtorch, and a
# program linking it aborts at start (DispatchKeySet.cpp ... INTERNAL ASSERT FAILED).
# Called after find_package(Torch): every libtorch library in TORCH_LIBRARIES and the c10/torch
# targets must come from one folder, the `torch` target's. A library found elsewhere is replaced
# by its target or by the same file in that folder, in TORCH_LIBRARIES and in find_library's
# cache (so a later find_package(Torch) agrees), with a warning; what cannot be replaced stops
# configuration with what to pass.
macro(modhooks_check_one_libtorch)
  _modhooks_one_libtorch(_modhooks_torch_libraries)
  if(DEFINED _modhooks_torch_libraries)
    set(TORCH_LIBRARIES "${_modhooks_torch_libraries}")
  endif()
  unset(_modhooks_torch_libraries)
endmacro()

function(_modhooks_one_libtorch out)
  _modhooks_imported_dir(torch _torch_dir)
  if(NOT _torch_dir)
    return()  # a static or unusual libtorch: nothing to compare against
  endif()
  set(_howto "Configure against one libtorch: pass -DCMAKE_PREFIX_PATH=${TORCH_INSTALL_PREFIX} \
(the libtorch folder itself, not its share/cmake) or put its lib folder first in \
CMAKE_LIBRARY_PATH, in a fresh build folder (or with -Uc10_LIBRARY -UTORCH_LIBRARY \
-Uc10_cuda_LIBRARY -UC10_CUDA_LIBRARY), or remove the other libtorch from the search path.")
  _modhooks_imported_dir(c10 _c10_dir)
  if(_c10_dir AND NOT _c10_dir STREQUAL _torch_dir)
    message(FATAL_ERROR "modhooks: mixed libtorch: the torch target's library is in ${_torch_dir} "
      "but the c10 target's is in ${_c10_dir}. ${_howto}")
  endif()
  set(_libs "")
  set(_fixed "")
  foreach(_lib IN LISTS TORCH_LIBRARIES)
    get_filename_component(_name "${_lib}" NAME)
    if(IS_ABSOLUTE "${_lib}" AND _name MATCHES "^lib(c10|torch)(_[a-z_]+)?\\.")
      get_filename_component(_real "${_lib}" REALPATH)
      get_filename_component(_dir "${_real}" DIRECTORY)
      if(NOT _dir STREQUAL _torch_dir)
        string(REGEX REPLACE "^lib([a-z0-9_]+)\\..*" "\\1" _stem "${_name}")
        if(TARGET ${_stem})
          set(_good ${_stem})
        elseif(EXISTS "${_torch_dir}/${_name}")
          set(_good "${_torch_dir}/${_name}")
        else()
          message(FATAL_ERROR "modhooks: mixed libtorch: TORCH_LIBRARIES names ${_lib}, but the "
            "torch target's library is in ${_torch_dir}, which has no ${_name}. ${_howto}")
        endif()
        list(APPEND _fixed "${_lib} -> ${_good}")
        set(_lib ${_good})
      endif()
    endif()
    list(APPEND _libs "${_lib}")
  endforeach()
  # find_library's results, cached: a later find_package(Torch) reuses them.
  foreach(_var c10_LIBRARY c10_cuda_LIBRARY C10_CUDA_LIBRARY TORCH_LIBRARY)
    if(${_var})
      get_filename_component(_name "${${_var}}" NAME)
      get_filename_component(_real "${${_var}}" REALPATH)
      get_filename_component(_dir "${_real}" DIRECTORY)
      if(NOT _dir STREQUAL _torch_dir AND EXISTS "${_torch_dir}/${_name}")
        list(APPEND _fixed "${_var}=${${_var}} -> ${_torch_dir}/${_name}")
        set(${_var} "${_torch_dir}/${_name}" CACHE FILEPATH "Path to a library." FORCE)
      endif()
    endif()
  endforeach()
  if(_fixed)
    list(REMOVE_DUPLICATES _fixed)
    list(JOIN _fixed "\n  " _fixed)
    message(WARNING "modhooks: mixed libtorch: find_library found libraries of another libtorch "
      "than the torch target's (${_torch_dir}); modhooks replaced them:\n  ${_fixed}\n"
      "TORCH_LIBRARIES is corrected only in the scope of find_package(modhooks). ${_howto}")
    set(${out} "${_libs}" PARENT_SCOPE)
  endif()
endfunction()
