// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "copy_checks.h"
#include "copy_fault.h"
#include "modhooks/core/error.h"
#include "modhooks/state/detail/load.h"
#include "modhooks/state/state_dict.h"
#include "modhooks/state/state_hooks.h"
#include "modhooks/version.h"
#include "texts.h"
#include "traversal.h"

// Python's `load_state_dict` over the traversal (traversal.h): match, check, copy all or nothing.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Python's `load_state_dict`, checked before anything changes. Per module, in pre-order:
/// pre-hooks (on the sub-dict of the module's keys, whose edits reach its subtree only); then
/// every key is matched in one pass (one hash lookup per module tensor, one prefix walk per
/// unmatched key, so the whole load is linear in the number of keys); then, only if nothing is
/// wrong, every tensor is copied; then post-hooks in post-order, seeing the lists Python's would
/// at that point. What can make a copy fail (`CopyChecks`) is checked in the matching pass, so a
/// load that fails before the copies leaves every parameter and buffer as it was, with no copy
/// of the model's values made. Only with load post-hooks are the former values kept, from the
/// copies until the load returns: a post-hook that throws, a strict check that fails on the lists
/// the post-hooks left and a copy that fails under the device then put every tensor back.
template <class Adapter>
class Loader {
  using Module = typename Adapter::Module;

  struct Node {
    std::shared_ptr<Module> module;
    std::string prefix;
    std::size_t subtree_end;
    std::shared_ptr<StateHooks<Module>> hooks;
    std::vector<std::string> missing, unexpected;
  };
  struct Copy {
    at::Tensor target, source;
    std::string key;
  };

 public:
  Loader(Module& root, const StateDict& input, bool strict, bool assign, TensorCopy* copy)
      : input_(input),
        strict_(strict),
        assign_(assign),
        root_name_(Adapter::class_name(root)),
        direct_(copy),
        fault_(CopyFaultGuard::active()) {
    add_subtree(std::shared_ptr<Module>(std::shared_ptr<Module>(), &root), "");  // not owned
  }

  IncompatibleKeys run() {
    run_pre_hooks();
    const StateDict& dict = working_ ? *working_ : input_;
    std::vector<Copy> copies = match(dict);
    find_unexpected(dict);

    bool has_post = false;
    for (const auto& node : nodes_)
      has_post = has_post || (node.hooks && !node.hooks->load_post.empty());
    if (!errors_.empty()) {
      const IncompatibleKeys keys = gather_all();
      if (strict_) raise(keys.missing_keys, keys.unexpected_keys);  // Python lists them too
      raise({}, {});
    }
    if (strict_ && !has_post) {  // post-hooks may still clear the lists
      const IncompatibleKeys keys = gather_all();
      if (!keys.missing_keys.empty() || !keys.unexpected_keys.empty()) {
        raise(keys.missing_keys, keys.unexpected_keys);
      }
    }
    std::vector<Undo> undo = commit(copies, has_post);
    if (!has_post) return gather_all();
    try {
      IncompatibleKeys keys = run_post_hooks();
      if (strict_ && (!keys.missing_keys.empty() || !keys.unexpected_keys.empty())) {
        raise(keys.missing_keys, keys.unexpected_keys);
      }
      return keys;
    } catch (...) {
      rollback(undo);
      throw;
    }
  }

 private:
  void add_subtree(std::shared_ptr<Module> module, const std::string& prefix) {
    const std::size_t index = nodes_.size();
    auto hooks = Adapter::hooks(*module);
    auto children = Adapter::children(*module);
    nodes_.push_back(Node{std::move(module), prefix, 0, std::move(hooks), {}, {}});
    prefixes_.emplace(prefix, index);
    for (auto& [name, child] : children) add_subtree(std::move(child), prefix + name + ".");
    nodes_[index].subtree_end = nodes_.size();
  }

  /// The module's `_metadata` entry in `dict` (empty when it has none), without a copy.
  static const Metadata& metadata_at(const StateDict& dict, const std::string& prefix) {
    static const Metadata none;
    auto found = dict.metadata().find(without_dot(prefix));
    return found == dict.metadata().end() ? none : found->second;
  }

  StateDict& working() {
    if (!working_) working_ = std::make_unique<StateDict>(input_);  // the caller's stays as is
    return *working_;
  }

  /// Per module, in pre-order: `torch.nn`'s upgrade of an old state dict, then the module's
  /// pre-hooks (Python runs both from `_load_from_state_dict`, the upgrade first).
  void run_pre_hooks() {
    for (auto& node : nodes_) {
      const StateDict& current = working_ ? *working_ : input_;
      Adapter::upgrade(
          *node.module, node.prefix, metadata_at(current, node.prefix), current,
          [&]() -> StateDict& { return working(); }, errors_);
      if (!node.hooks || node.hooks->load_pre.empty()) continue;
      working();  // hooks edit the load's own copy
      const Metadata local_metadata = metadata_at(*working_, node.prefix);  // hooks may edit it
      if (node.prefix.empty()) {
        node.hooks->load_pre.for_each([&](const auto& hook) {
          hook(*node.module, *working_, node.prefix, local_metadata, true, node.missing,
               node.unexpected, errors_);
        });
        continue;
      }
      // A child's hooks see only its keys; what they leave under its prefix replaces them.
      StateDict sub;
      std::vector<std::string> owned;
      for (const auto& [key, tensor] : *working_) {
        if (key.compare(0, node.prefix.size(), node.prefix) == 0) {
          sub.insert_or_assign(key, tensor);
          owned.push_back(key);
        }
      }
      node.hooks->load_pre.for_each([&](const auto& hook) {
        hook(*node.module, sub, node.prefix, local_metadata, true, node.missing, node.unexpected,
             errors_);
      });
      for (const auto& key : owned) working_->erase(key);
      for (const auto& [key, tensor] : sub) {
        if (key.compare(0, node.prefix.size(), node.prefix) == 0) {
          working_->insert_or_assign(key, tensor);
        }
      }
    }
  }

  std::vector<Copy> match(const StateDict& dict) {
    std::vector<Copy> copies;
    CopyChecks checks;
    for (auto& node : nodes_) {
      for (auto& own : own_tensors<Adapter>(*node.module)) {
        std::string key = node.prefix + own.name;
        auto found = dict.find(key);
        if (found == dict.end()) {
          node.missing.push_back(std::move(key));
          continue;
        }
        matched_.insert(key);
        at::Tensor source = found->second;
        if (!source.defined()) {
          push_error("state.load.none_tensor",
                     fmt::format("While copying the parameter named \"{}\", expected torch.Tensor "
                                 "or Tensor-like object from checkpoint but received NoneType",
                                 key));
          continue;
        }
        // Python's backward compatibility: a 0-dim parameter loads from a 1-element 1-dim entry.
        if (own.tensor.dim() == 0 && source.dim() == 1 && source.size(0) == 1) source = source[0];
        if (source.sizes() != own.tensor.sizes()) {
          push_error("state.load.size_mismatch",
                     fmt::format("size mismatch for {}: copying a param with shape {} from "
                                 "checkpoint, the shape in current model is {}.",
                                 key, torch_size(source.sizes()), torch_size(own.tensor.sizes())));
          continue;
        }
        // What would make this copy fail is found now, before anything is written.
        try {
          if (fault_) fault_->at(CopyStage::kCheck, copies.size());
          if (assign_) {
            CopyChecks::swap(own.tensor, source);
          } else {
            checks.copy(own.tensor, source);
          }
        } catch (const std::exception& e) {
          push_error("state.load.copy_failed", copy_failed(key, own.tensor, source, e));
          copies.push_back(Copy{});  // the copies keep their numbering
          continue;
        }
        copies.push_back(Copy{own.tensor, std::move(source), std::move(key)});
      }
    }
    return copies;
  }

  /// Python's rule: a key is left to the deepest module whose prefix it starts with; there it is
  /// unexpected unless it names one of that module's tensors.
  void find_unexpected(const StateDict& dict) {
    for (const auto& [key, tensor] : dict) {
      if (matched_.count(key)) continue;
      std::size_t owner = 0;
      for (std::size_t dot = key.rfind('.'); dot != std::string::npos;
           dot = dot == 0 ? std::string::npos : key.rfind('.', dot - 1)) {
        auto found = prefixes_.find(key.substr(0, dot + 1));
        if (found != prefixes_.end()) {
          owner = found->second;
          break;
        }
      }
      nodes_[owner].unexpected.push_back(key);
    }
  }

  void append(IncompatibleKeys& keys, const Node& node) {
    keys.missing_keys.insert(keys.missing_keys.end(), node.missing.begin(), node.missing.end());
    keys.unexpected_keys.insert(keys.unexpected_keys.end(), node.unexpected.begin(),
                                node.unexpected.end());
  }

  IncompatibleKeys gather_all() {
    IncompatibleKeys keys;
    for (const auto& node : nodes_) append(keys, node);
    return keys;
  }

  /// Post-order; before a module's hooks run, the lists hold what Python's traversal would have
  /// found by then: every module up to the end of this one's subtree, in pre-order.
  IncompatibleKeys run_post_hooks() {
    IncompatibleKeys keys;
    std::size_t flushed = 0;
    post_order(0, keys, flushed);
    return keys;
  }

  void post_order(std::size_t index, IncompatibleKeys& keys, std::size_t& flushed) {
    for (std::size_t child = index + 1; child < nodes_[index].subtree_end;
         child = nodes_[child].subtree_end) {
      post_order(child, keys, flushed);
    }
    for (; flushed < nodes_[index].subtree_end; ++flushed) append(keys, nodes_[flushed]);
    const Node& node = nodes_[index];
    if (!node.hooks) return;
    node.hooks->load_post.for_each([&](const auto& hook) { hook(*node.module, keys); });
  }

  /// What a copy overwrote, kept only while a load post-hook may still fail the load. A
  /// tensor's former values are kept in host memory, so a load into a CUDA model needs no second
  /// copy of the model on the device.
  struct Undo {
    at::Tensor target, former;
  };

  /// Copies (or, with `assign`, swaps in) every matched tensor. Everything that can fail a copy
  /// was checked in `match` (and by `direct_->prepare`), so the former values are kept only when
  /// post-hooks run after the copies: they may throw, or leave keys that fail a strict load, and
  /// the load is then undone. What is left to fail a copy is the device or the file under it: the
  /// former values, when kept, are put back; else the error says which tensors were written.
  std::vector<Undo> commit(const std::vector<Copy>& copies, bool has_post) {
    at::NoGradGuard no_grad;
    if (direct_ && !assign_) {
      std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
      pairs.reserve(copies.size());
      for (const Copy& c : copies) {
        if (!c.target.is_meta()) pairs.emplace_back(c.target, c.source);
      }
      direct_->prepare(pairs);
    }
    std::vector<Undo> undo;
    if (has_post) undo.reserve(copies.size());
    for (std::size_t i = 0; i < copies.size(); ++i) {
      const Copy& c = copies[i];
      try {
        if (fault_) fault_->at(CopyStage::kWrite, i);
        if (assign_) {
          if (has_post) undo.push_back(Undo{c.target, c.target.variable_data()});
          swap_in(c.target, c.source);
        } else if (c.target.is_meta()) {
          // Python's copy into a meta tensor: a no-op, with its warning when the data is real.
          if (!c.source.is_meta()) warn_meta_copy(c.key);
        } else {
          if (has_post) {
            undo.push_back(Undo{c.target, c.target.to(at::kCPU, /*non_blocking=*/false,
                                                      /*copy=*/true)});
          }
          if (direct_) {
            direct_->copy(c.target, c.source);
          } else {
            c.target.copy_(c.source);
          }
        }
      } catch (const std::exception& e) {
        push_error("state.load.copy_failed", copy_failed(c.key, c.target, c.source, e));
        if (has_post) {
          rollback(undo);
        } else {
          std::vector<std::string> written;
          for (std::size_t k = 0; k < i; ++k) {
            if (assign_ || !copies[k].target.is_meta()) written.push_back(copies[k].key);
          }
          errors_.push_back(fmt::format(
              "Without load post-hooks the load keeps no copy of the model's former values, so "
              "the tensors written before this one hold the checkpoint's values ({}) and \"{}\" "
              "may be partly written; the others are as they were.",
              written.empty() ? std::string("none") : quoted_list(written), c.key));
        }
        raise({}, {});
      }
    }
    return undo;
  }

  static std::string copy_failed(const std::string& key, const at::Tensor& target,
                                 const at::Tensor& source, const std::exception& e) {
    return fmt::format(
        "While copying the parameter named \"{}\", whose dimensions in the model are {} and "
        "whose dimensions in the checkpoint are {}, an exception occurred : ('{}',).",
        key, torch_size(target.sizes()), torch_size(source.sizes()), message_of(e));
  }

  /// Puts every undone tensor back, the failed one included (a copy may fail after writing
  /// part of it). Restoring a tensor that the failed copy never wrote may fail the same way (an
  /// unwritable `expand`ed buffer): that one is left, the others are still restored.
  void rollback(const std::vector<Undo>& undo) noexcept {
    at::NoGradGuard no_grad;
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
      try {
        if (assign_) {
          swap_in(it->target, it->former);
        } else {
          it->target.copy_(it->former);
        }
      } catch (const std::exception&) {
        // Left as the failed copy left it; see above.
      }
    }
  }

  static void warn_meta_copy(const std::string& key) {
    TORCH_WARN("for ", key,
               ": copying from a non-meta parameter in the checkpoint to a meta parameter in the "
               "current model, which is a no-op. (Did you mean to pass `assign=True` to assign "
               "items in the state dictionary to their corresponding key in the module instead "
               "of copying them in place?)");
  }

  /// Adds `message` to errors_, remembering `id` when it is the first: raise names the load's
  /// failure after it.
  void push_error(const char* id, std::string message) {
    if (errors_.empty()) first_error_ = id;
    errors_.push_back(std::move(message));
  }

  [[noreturn]] void raise(const std::vector<std::string>& missing,
                          const std::vector<std::string>& unexpected) {
    std::vector<std::string> messages;
    if (!missing.empty()) {
      messages.push_back("Missing key(s) in state_dict: " + quoted_list(missing) + ". ");
    }
    if (!unexpected.empty()) {
      messages.push_back("Unexpected key(s) in state_dict: " + quoted_list(unexpected) + ". ");
    }
    messages.insert(messages.end(), errors_.begin(), errors_.end());
    const char* id = !missing.empty()      ? "state.load.missing_keys"
                     : !unexpected.empty() ? "state.load.unexpected_keys"
                                           : first_error_;
    fail<RuntimeError>(id, fmt::format("Error(s) in loading state_dict for {}:\n\t{}", root_name_,
                                       fmt::join(messages, "\n\t")));
  }

  const StateDict& input_;
  const bool strict_;
  const bool assign_;
  const std::string root_name_;
  TensorCopy* const direct_;           // load_model's, or null
  const CopyFaultGuard* const fault_;  // the tests' seam, or null
  std::unique_ptr<StateDict> working_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, std::size_t> prefixes_;
  std::unordered_set<std::string> matched_;
  std::vector<std::string> errors_;
  /// The id of errors_'s first entry; hooks and the upgrade push theirs into errors_ directly.
  const char* first_error_ = "state.load.error_msgs";
};

template <class Adapter>
IncompatibleKeys load_state_dict(typename Adapter::Module& module, const StateDict& state_dict,
                                 bool strict, bool assign, TensorCopy* copy) {
  return Loader<Adapter>(module, state_dict, strict, assign, copy).run();
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
