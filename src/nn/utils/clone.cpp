// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// A clone of a module with utilities, as Python's `copy.deepcopy` makes it. libtorch's `clone`
// (`torch::nn::Cloneable`) builds the copy with the class's `reset()` and then copies each tensor
// of the original by name into the copy: it cannot find `weight_g` in a fresh `Linear`. So the
// tensors of every module with utilities are laid out as its class registers them while
// libtorch's clone runs (the tables themselves put back after, the same tensors in the same
// order, so optimizers built on them are untouched); the copy then gets the same utilities and
// the original's state dict.
#include "clone.h"

#include <string>
#include <utility>
#include <vector>

#include "attributes.h"
#include "modhooks/nn/detail/clone.h"
#include "modhooks/nn/utils/parametrize.h"
#include "modhooks/state/module_state.h"

MODHOOKS_BEGIN_NAMESPACE
namespace nn::utils::detail {
namespace {

using Children = torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>;

/// A module's tables as they were, put back when this dies.
class Tables {
 public:
  explicit Tables(torch::nn::Module& module)
      : module_(&module),
        parameters_(parameters_of(module)),
        buffers_(buffers_of(module)),
        children_(children_of(module)) {}
  Tables(Tables&& other) noexcept
      : module_(std::exchange(other.module_, nullptr)),
        parameters_(std::move(other.parameters_)),
        buffers_(std::move(other.buffers_)),
        children_(std::move(other.children_)) {}
  Tables(const Tables&) = delete;
  Tables& operator=(const Tables&) = delete;
  Tables& operator=(Tables&&) = delete;
  ~Tables() {
    if (module_ == nullptr) return;
    parameters_of(*module_) = std::move(parameters_);
    buffers_of(*module_) = std::move(buffers_);
    children_of(*module_) = std::move(children_);
  }

 private:
  torch::nn::Module* module_;
  TensorDict parameters_;
  TensorDict buffers_;
  Children children_;
};

/// Lays `module`'s tensors out as its class registers them: each utility's own tensors out, its
/// tensor back under its name (the value its forward reads), `parametrizations` out.
void lay_out_as_registered(torch::nn::Module& module, const Utilities& utilities) {
  for (auto it = utilities.applied.rbegin(); it != utilities.applied.rend(); ++it) {
    const Applied& applied = **it;
    for (const auto& [added, what] : applied.added()) {
      (what == Attribute::kParameter ? parameters_of(module) : buffers_of(module)).erase(added);
    }
    TensorDict& table =
        applied.was() == Attribute::kParameter ? parameters_of(module) : buffers_of(module);
    if (!table.contains(applied.name)) table.insert(applied.name, applied.member.get());
  }
  if (parametrize::detail::is_parametrized(module, std::nullopt)) {
    children_of(module).erase("parametrizations");
  }
}

/// A module with utilities, where it is in the tree cloned.
struct Found {
  std::string path;
  torch::nn::Module* module;
  std::shared_ptr<Utilities> utilities;
};

void find_utilities_under(torch::nn::Module& module, const std::string& path,
                          std::vector<Found>& found) {
  if (auto utilities = find_utilities(module); utilities && !utilities->applied.empty()) {
    found.push_back({path, &module, std::move(utilities)});
  }
  for (const auto& child : children_of(module)) {
    find_utilities_under(*child.value(), path.empty() ? child.key() : path + "." + child.key(),
                         found);
  }
}

torch::nn::Module& at_path(torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* module = &root;
  std::size_t start = 0;
  while (start < path.size()) {
    const std::size_t dot = std::min(path.find('.', start), path.size());
    module = children_of(*module)[path.substr(start, dot - start)].get();
    start = dot + 1;
  }
  return *module;
}

}  // namespace

std::shared_ptr<torch::nn::Module> clone_around(const torch::nn::Module& original,
                                                const modhooks::detail::CloneCopy& copy) {
  // libtorch's clone reads the tables of a const module; laying them out writes them, and puts
  // back the very same tensors before it returns.
  auto& root = const_cast<torch::nn::Module&>(original);
  std::vector<Found> found;
  find_utilities_under(root, "", found);
  if (found.empty()) return copy();
  const StateDict state = modhooks::state_dict(root);
  std::shared_ptr<torch::nn::Module> made;
  {
    std::vector<Tables> saved;
    saved.reserve(found.size());
    for (const Found& f : found) {
      saved.emplace_back(*f.module);
      lay_out_as_registered(*f.module, *f.utilities);
    }
    made = copy();
  }
  for (const Found& f : found) {
    torch::nn::Module& target = at_path(*made, f.path);
    for (const auto& applied : f.utilities->applied) applied->apply_to(target);
  }
  modhooks::load_state_dict(*made, state);
  return made;
}

void clone_with_utilities() noexcept {
  modhooks::detail::clone_around_utilities.store(&clone_around, std::memory_order_release);
}

}  // namespace nn::utils::detail
MODHOOKS_END_NAMESPACE
