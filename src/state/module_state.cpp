// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/state/module_state.h"

#include <c10/util/Type.h>
#include <fmt/format.h>
#include <torch/nn/functional.h>  // libtorch 1.13: before the modules that use it
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/instancenorm.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader.h"
#include "modhooks/core/detail/module_table.h"
#include "modhooks/state/detail/load.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// How the traversal walks torch::nn modules.
struct NnAdapter {
  using Module = torch::nn::Module;

  static std::vector<std::pair<std::string, std::shared_ptr<Module>>> children(Module& module) {
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
    for (const auto& child : module.named_children()) out.emplace_back(child.key(), child.value());
    return out;
  }

  template <class Item>
  static std::pair<const std::string&, const at::Tensor&> entry(const Item& item) {
    return {item.key(), item.value()};
  }

  static std::shared_ptr<StateHooks<Module>> hooks(Module& module) {
    return find_state_hooks(module);
  }

  /// Python's `type(self).__name__`: the class name without namespaces or libtorch's "Impl".
  static std::string class_name(Module& module) { return python_class_name(module); }

  /// Python's `_version`: 2 for the norms that keep running statistics (`_NormBase`), 1 else.
  static std::int64_t version(Module& module) {
    return batch_norm_stats(module) || instance_norm_stats(module) ? 2 : 1;
  }

  /// `_BatchNorm` and `_InstanceNorm`'s `_load_from_state_dict` upgrades, for libtorch's
  /// counterparts: before version 2 a BatchNorm's state dict had no `num_batches_tracked` (the
  /// module keeps its own, or 0 on the meta device); before version 1 an InstanceNorm without
  /// running statistics still saved them (an error, and the keys are dropped).
  template <class Edit>
  static void upgrade(Module& module, const std::string& prefix, const Metadata& local_metadata,
                      const StateDict& dict, Edit&& edit, std::vector<std::string>& errors) {
    const auto found = local_metadata.find("version");
    const bool has_version = found != local_metadata.end();
    if (auto stats = batch_norm_stats(module)) {
      const std::string key = prefix + "num_batches_tracked";
      if ((!has_version || found->second < 2) && stats->track_running_stats &&
          !dict.contains(key)) {
        const at::Tensor& own = stats->num_batches_tracked;
        edit().insert_or_assign(key,
                                own.defined() && !own.is_meta() ? own : at::zeros({}, at::kLong));
      }
    } else if (auto stats = instance_norm_stats(module)) {
      if (has_version || stats->track_running_stats) return;
      std::vector<std::string> keys;
      for (const char* name : {"running_mean", "running_var"}) {
        if (dict.contains(prefix + name)) keys.push_back(prefix + name);
      }
      if (keys.empty()) return;
      const std::string klass = python_class_name(module);
      errors.push_back(fmt::format(
          "Unexpected running stats buffer(s) {} for {} with track_running_stats=False. If "
          "state_dict is a checkpoint saved before 0.4.0, this may be expected because {} does "
          "not track running stats by default since 0.4.0. Please remove these keys from "
          "state_dict. If the running stats are actually needed, instead set "
          "track_running_stats=True in {} to enable them. See the documentation of {} for "
          "details.",
          quoted_list(keys, " and "), klass, klass, klass, klass));
      for (const auto& key : keys) edit().erase(key);
    }
  }

 private:
  struct NormStats {
    bool track_running_stats;
    at::Tensor num_batches_tracked;
  };

  /// The running-statistics settings of `module` when it is one of `Impls`.
  template <class... Impls>
  static std::optional<NormStats> norm_stats(Module& module) {
    std::optional<NormStats> out;
    auto probe = [&](auto* impl) {
      if (!out && impl)
        out = NormStats{impl->options.track_running_stats(), impl->num_batches_tracked};
    };
    (probe(dynamic_cast<Impls*>(&module)), ...);
    return out;
  }
  static std::optional<NormStats> batch_norm_stats(Module& module) {
    return norm_stats<torch::nn::BatchNorm1dImpl, torch::nn::BatchNorm2dImpl,
                      torch::nn::BatchNorm3dImpl>(module);
  }
  static std::optional<NormStats> instance_norm_stats(Module& module) {
    return norm_stats<torch::nn::InstanceNorm1dImpl, torch::nn::InstanceNorm2dImpl,
                      torch::nn::InstanceNorm3dImpl>(module);
  }
};

}  // namespace

template <>
ModuleTable<NnStateHooks, NnOwner>& nn_table<NnStateHooks>() noexcept {
  static ModuleTable<NnStateHooks, NnOwner> table;
  return table;
}

std::shared_ptr<NnStateHooks> find_state_hooks(const torch::nn::Module& module) {
  return entry_find(nn_table<NnStateHooks>(), module);
}

std::shared_ptr<NnStateHooks> state_hooks_for(torch::nn::Module& module) {
  return entry_for(nn_table<NnStateHooks>(), module);
}

std::shared_ptr<NnStateHooks> state_data_for(torch::nn::Module& module) {
  return data_entry_for(nn_table<NnStateHooks>(), module);
}

IncompatibleKeys load_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign, TensorCopy* copy) {
  return load_state_dict<NnAdapter>(module, state_dict, strict, assign, copy);
}

}  // namespace detail

StateDict state_dict(torch::nn::Module& module, const std::string& prefix, bool keep_vars) {
  return detail::state_dict<detail::NnAdapter>(module, prefix, keep_vars);
}

IncompatibleKeys load_state_dict(torch::nn::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign) {
  return detail::load_state_dict(module, state_dict, strict, assign, nullptr);
}

MODHOOKS_END_NAMESPACE
