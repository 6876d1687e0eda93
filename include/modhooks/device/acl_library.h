// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// \file
/// Where the NPU backend finds CANN's ACL libraries. modhooks never links ACL: it loads
/// libascendcl.so, libnnopbase.so and libopapi.so with dlopen the first time an NPU gradient is
/// rewritten, so a build without CANN runs everywhere else.

#include <string>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device {

/// \addtogroup api_device
/// @{

/// Searches `dir` before every other place. Must come before the first NPU use; afterwards it
/// throws modhooks::Error naming the directory ACL was loaded from. An empty `dir` clears it.
///
/// **Example**:
/// \code
///   modhooks::device::set_acl_library_path("/opt/cann/lib64");  // before any NPU gradient
/// \endcode
void set_acl_library_path(const std::string& dir);

/// The directories searched for libascendcl.so, in order: set_acl_library_path, then
/// $MODHOOKS_ACL_LIB_DIR, then lib64 and `<arch>-linux/lib64` under $ASCEND_HOME_PATH and
/// $ASCEND_TOOLKIT_HOME, then the standard CANN install paths. If none holds it, the dynamic
/// loader's own search (LD_LIBRARY_PATH, ld.so.cache) is the last resort. A libascendcl.so that
/// is already loaded (by torch_npu, say) always wins, so one process never holds two runtimes.
///
/// **Example**:
/// \code
///   for (const std::string& dir : modhooks::device::acl_search_paths()) std::cout << dir << "\n";
/// \endcode
std::vector<std::string> acl_search_paths();

/// @}

}  // namespace device
MODHOOKS_END_NAMESPACE
