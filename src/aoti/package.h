// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modhooks/aoti/point.h"
#include "modhooks/dispatch/detail/global.h"
#include "modhooks/points/detail/program.h"
#include "modhooks/version.h"

// A loaded package: AOTInductor's loader, the checks before it runs anything of the package, and
// the table of points that modhooks.export wrote into its metadata.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

class AotiModel : public CompiledProgram<AotiModel, aoti::Point> {
 public:
  /// What `Points` needs of a program (modhooks/points/detail/firing.h).
  static const ProgramWords words;  // defined beside the errors that use it

  /// Loads the package at `path` with `num_runners` runners; throws `aoti.model.num_runners`,
  /// `aoti.package.*` as docs/errors.md lists them.
  AotiModel(std::string path, std::size_t num_runners, const std::string& model_name,
            int device_index);

  /// `aoti.model.reentrant_run`: a hook ran this model with each of its runners serving a run
  /// on this thread, where libtorch's loader would wait for a runner forever.
  [[noreturn]] void refuse_reentrant_run() const;

  std::size_t runners;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;

 private:
  [[noreturn]] void fail_unloadable(const std::exception& e) const;
  /// `aoti.package.abi_mismatch` where the package's modhooks ABI is not this library's.
  void check_abi(const std::unordered_map<std::string, std::string>& metadata) const;
  /// `aoti.package.cuda_unavailable` where it was compiled for CUDA and this process has none.
  void check_device(const std::unordered_map<std::string, std::string>& metadata) const;
  /// The point table modhooks.export wrote into the metadata, where it wrote one.
  void read_point_table(const std::unordered_map<std::string, std::string>& metadata);
};

/// The global lists of this kind, instantiated in src/aoti/package.cpp.
extern template struct GlobalHooks<const aoti::Point>;

}  // namespace detail
MODHOOKS_END_NAMESPACE
