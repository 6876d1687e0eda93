// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// Hand-made torch.save archives, for the tests of hostile and unusual checkpoints.
#pragma once

#include <caffe2/serialize/inline_container.h>

#include <cstddef>
#include <functional>
#include <string>

namespace test_archives {

/// Writes a torch.save archive of this data.pkl and these data/<key> records (pairs of key and
/// bytes) through `write`, which takes each run of bytes and returns how many it took.
template <class Records>
void write_torch_save(const std::string& pickle, const Records& records,
                      const std::function<std::size_t(const void*, std::size_t)>& write) {
  caffe2::serialize::PyTorchStreamWriter writer(write);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [key, data] : records) {
    writer.writeRecord("data/" + key, data.data(), data.size());
  }
  writer.writeEndOfFile();
}

}  // namespace test_archives
