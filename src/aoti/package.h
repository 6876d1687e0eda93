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
#include "modhooks/points/detail/replacement.h"
#include "modhooks/version.h"

// A loaded package: AOTInductor's loader, the checks before it runs anything of the package, and
// the table of points that modhooks.export wrote into its metadata.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

class AotiModel {
 public:
  /// What `Points` needs of a program (modhooks/points/detail/firing.h).
  using PointType = aoti::Point;
  static constexpr PointErrorIds ids{"aoti.point.keep_failed", "aoti.hook.bad_replacement",
                                     "aoti.hook.replacement_mismatch"};

  /// Loads the package at `path` with `num_runners` runners; throws `aoti.model.num_runners`,
  /// `aoti.package.*` as docs/errors.md lists them.
  AotiModel(std::string path, std::size_t num_runners, const std::string& model_name,
            int device_index);

  const aoti::Point* find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  /// `aoti.model.reentrant_run`: a hook ran this model with each of its runners serving a run
  /// on this thread, where libtorch's loader would wait for a runner forever.
  [[noreturn]] void refuse_reentrant_run() const;
  /// `aoti.model.run_failed`: the package's run threw `e`, which no hook threw.
  [[noreturn]] void fail_run(const std::exception& e) const;

  std::string path;
  std::size_t runners;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  std::vector<std::unique_ptr<aoti::Point>> points;
  std::vector<std::string> names;

 private:
  [[noreturn]] void fail_unloadable(const std::exception& e) const;
  /// `aoti.package.abi_mismatch` where the package's modhooks ABI is not this library's.
  void check_abi(const std::unordered_map<std::string, std::string>& metadata) const;
  /// `aoti.package.cuda_unavailable` where it was compiled for CUDA and this process has none.
  void check_device(const std::unordered_map<std::string, std::string>& metadata) const;
  void read_points(const std::unordered_map<std::string, std::string>& metadata);

  std::unordered_map<std::string_view, const aoti::Point*> by_name_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
