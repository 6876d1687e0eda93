// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <caffe2/serialize/read_adapter_interface.h>

namespace modhooks {
namespace detail {

/// Validates a zip archive's directory before libtorch's zip reader opens it.
///
/// libtorch's reader (miniz) allocates a record's uncompressed size as its central directory
/// states it, and trusts that size for compressed and zip64 entries, so a few hostile bytes could
/// ask for terabytes. torch.save stores every record uncompressed, so modhooks accepts only such
/// archives: every entry stored, its sizes equal, its data inside the file, no two entries
/// overlapping and no name twice (case-insensitively, as miniz looks names up). Then every record
/// libtorch reads is bounded by the file, and all records together by the file's size. The
/// records libtorch's reader reads while it is constructed are checked too (folder, version,
/// CRCs), because that constructor leaks when it throws.
void check_zip_layout(const caffe2::serialize::ReadAdapterInterface& in);

}  // namespace detail
}  // namespace modhooks
