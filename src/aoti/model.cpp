// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/aoti/model.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/dispatch/detail/global.h"

MODHOOKS_BEGIN_NAMESPACE

namespace aoti {

Point::Point(std::string name, std::string type_name, bool inputs, bool single, std::size_t index)
    : name_(std::move(name)),
      type_name_(std::move(type_name)),
      inputs_(inputs),
      single_(single),
      index_(index),
      hooks_(std::make_shared<modhooks::detail::PointHooks>()) {}

}  // namespace aoti

namespace detail {

const std::shared_ptr<PointHooks>& hooks_for(const aoti::Point& point) noexcept {
  return point.hooks_;
}

/// The keys of a package's metadata that modhooks writes (python/modhooks/export.py).
constexpr const char* kAbiKey = "modhooks.abi";
constexpr const char* kPointsKey = "modhooks.points";

/// The hook-point protocol's version: the library's ABI, major.minor while the major version
/// is 0, as the ABI namespace and the soname are.
std::string library_abi() {
  return std::to_string(MODHOOKS_VERSION_MAJOR) + "." + std::to_string(MODHOOKS_VERSION_MINOR);
}

class AotiModel {
 public:
  AotiModel(std::string path, std::size_t num_runners, const std::string& model_name,
            int device_index);

  const aoti::Point* find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  std::string path;
  std::size_t runners;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  std::vector<std::unique_ptr<aoti::Point>> points;
  std::vector<std::string> names;

 private:
  void read_points(const std::unordered_map<std::string, std::string>& metadata);

  std::unordered_map<std::string_view, const aoti::Point*> by_name_;
};

namespace {

/// One `Model::run` on this thread: which model the operators' kernels serve, what a hook threw,
/// and the args each point's inputs showed its pre-hooks, kept for its forward hooks.
struct Run {
  AotiModel* model;
  Run* outer;  // a run started by a hook of another run
  std::exception_ptr error;
  std::vector<std::optional<std::vector<c10::IValue>>> args;
};

thread_local Run* current_run = nullptr;

bool zip_file(const std::string& path, bool& exists) {
  std::ifstream file(path, std::ios::binary);
  exists = static_cast<bool>(file);
  char magic[4] = {};
  file.read(magic, sizeof magic);
  return file.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

std::string describe(const at::Tensor& t) {
  std::string sizes;
  for (auto s : t.sizes()) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
  return std::string(c10::toString(t.scalar_type())) + "[" + sizes + "] on " + t.device().str();
}

/// The tensors shown at one point (its outputs or its inputs): one or a few.
using Shown = c10::SmallVector<at::Tensor, 4>;

/// The aliases of earlier firings on this thread that no hook kept: making a storage and a
/// tensor object for each shown tensor was about a third of what a firing cost (aoti_bench), so
/// `shown_alias` points one of these at the new memory instead. Bounded: a thread keeps at most
/// this many.
thread_local std::vector<at::Tensor> spare_aliases;
constexpr std::size_t kMaxSpareAliases = 64;

/// Whether nothing but `alias` itself owns it or its storage, strongly or weakly, and no hook
/// gave it autograd state: what a hook did to it is then gone with the firing.
bool unshared(const at::Tensor& alias) {
  const c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
  const c10::Storage& storage = impl->storage();
  if (alias.use_count() != 1 || alias.weak_use_count() != 1 || storage.use_count() != 1 ||
      impl->autograd_meta() != nullptr) {
    return false;
  }
  // Its weak count, read as c10::raw::intrusive_ptr::use_count reads a strong one: through an
  // intrusive_ptr that neither takes a reference nor drops one.
  auto owner = c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage.unsafeGetStorageImpl());
  const bool weakly_unshared = owner.weak_use_count() == 1;
  owner.release();
  return weakly_unshared;
}

/// A tensor over `x`'s memory with a storage object of its own, which is what hooks see: the
/// compiled model reuses its buffers once a value is dead, so a hook that keeps what it got
/// (Python users do: `acts[name] = output`) would find other values there later. `keep_valid`
/// swaps the memory of this storage for a copy where a hook kept the tensor or a view of it;
/// where none did, nothing is copied and the alias goes back to `spare_aliases`.
at::Tensor shown_alias(const at::Tensor& x) {
  const c10::Storage& memory = x.storage();
  c10::DataPtr data(memory.mutable_data(), x.device());
  if (!spare_aliases.empty()) {
    at::Tensor alias = std::move(spare_aliases.back());
    spare_aliases.pop_back();
    // The device too: two GPUs have the same dispatch keys, and a tensor's device is fixed
    // when it is made.
    if (alias.key_set() == x.key_set() && alias.dtype() == x.dtype() &&
        alias.device() == x.device()) {
      c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
      impl->storage().unsafeGetStorageImpl()->UniqueStorageShareExternalPointer(std::move(data),
                                                                                memory.nbytes());
      // Consecutive points often show tensors of one geometry: setting it anew recomputes the
      // contiguity flags, about 110 of a firing's 812 instructions (callgrind, aoti_bench's 16
      // Linear points), so it is set only where it differs.
      if (impl->storage_offset() != x.storage_offset() || impl->sizes() != x.sizes() ||
          impl->strides() != x.strides()) {
        impl->set_sizes_and_strides(x.sizes(), x.strides(), x.storage_offset());
      }
      return alias;
    }
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), memory.nbytes(), std::move(data),
                       /*allocator=*/nullptr, /*resizable=*/false);
  auto alias = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), x.key_set(), x.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(x.sizes(), x.strides(), x.storage_offset());
  return alias;
}

Shown shown_aliases(at::TensorList xs) {
  Shown shown;
  for (const auto& x : xs) shown.push_back(shown_alias(x));
  return shown;
}

/// Gives each alias in `shown` that a hook kept (another owner of it or of its storage exists
/// once the hooks' values are gone) a copy of the memory of the tensor it shows, `xs[i]`; the
/// others go back to `spare_aliases`.
void keep_valid(Shown& shown, at::TensorList xs) {
  for (std::size_t i = 0; i < shown.size(); ++i) {
    at::Tensor& alias = shown[i];
    if (unshared(alias)) {
      if (spare_aliases.size() < kMaxSpareAliases) spare_aliases.push_back(std::move(alias));
      continue;
    }
    const c10::Storage& storage = alias.unsafeGetTensorImpl()->storage();
    const auto nbytes = static_cast<std::int64_t>(storage.nbytes());
    auto bytes = at::TensorOptions().dtype(at::kByte).device(alias.device());
    at::Tensor copy = at::empty({nbytes}, bytes);
    copy.copy_(at::empty({0}, bytes).set_(xs[i].storage(), 0, {nbytes}, {1}));
    c10::DataPtr data = copy.storage().unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr());
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(data));
  }
}

/// Runs `hooks` on the aliases in `shown`, then `keep_valid`: also when a hook throws, since it
/// may have kept what it was shown before it did.
template <class Hooks>
void run_keeping_valid(Shown& shown, at::TensorList xs, Hooks&& hooks) {
  try {
    hooks();
  } catch (...) {
    keep_valid(shown, xs);
    throw;
  }
  keep_valid(shown, xs);
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.storage().data());
  const auto* b0 = static_cast<const char*>(b.storage().data());
  return a0 < b0 + b.storage().nbytes() && b0 < a0 + a.storage().nbytes();
}

/// The tensors of a replacement `value` for what the compiled graph holds at this point,
/// `expected`: each of the same sizes, dtype and device, since the kernels after the point were
/// compiled for those.
std::vector<at::Tensor> replacement(const aoti::Point& point, const char* what,
                                    const c10::IValue& value, at::TensorList expected,
                                    bool single) {
  std::vector<at::Tensor> got;
  if (single && value.isTensor()) {
    got.push_back(value.toTensor());
  } else if (!single && (value.isTuple() || value.isTensorList() || value.isList())) {
    for (const auto& v :
         value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec()) {
      if (!v.isTensor()) {
        fail<TypeError>("aoti.hook.bad_replacement",
                        "modhooks: a hook on point '" + point.name() + "' returned a " + what +
                            " holding a " + v.tagKind() + "; the compiled graph holds tensors");
      }
      got.push_back(v.toTensor());
    }
  } else {
    fail<TypeError>("aoti.hook.bad_replacement",
                    "modhooks: a hook on point '" + point.name() + "' returned a " +
                        value.tagKind() + " as its " + what + "; the compiled graph holds " +
                        (single ? std::string("a tensor")
                                : std::to_string(expected.size()) + " tensors (a tuple)"));
  }
  if (got.size() != expected.size()) {
    fail<TypeError>("aoti.hook.bad_replacement",
                    "modhooks: a hook on point '" + point.name() + "' returned " +
                        std::to_string(got.size()) + " tensors as its " + what +
                        "; the compiled graph holds " + std::to_string(expected.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const at::Tensor& g = got[i];
    const at::Tensor& e = expected[i];
    if (!g.defined() || g.sizes() != e.sizes() || g.scalar_type() != e.scalar_type() ||
        g.device() != e.device()) {
      fail<ValueError>("aoti.hook.replacement_mismatch",
                       "modhooks: a hook on point '" + point.name() + "' replaced " + what +
                           " tensor " + std::to_string(i) + " with " +
                           (g.defined() ? describe(g) : std::string("an undefined tensor")) +
                           "; the compiled graph expects " + describe(e));
    }
  }
  return got;
}

/// Writes `values` (`xs` itself where there are none) into `outs`, the new tensors the graph
/// allocated for the copying operators.
void write_copies(at::TensorList outs, at::TensorList xs, const std::vector<at::Tensor>* values) {
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const_cast<at::Tensor&>(outs[i]).copy_(values ? (*values)[i] : xs[i]);
  }
}

const PointHooks* global_point_hooks() {
  return global_hooks_active<const aoti::Point>().load(std::memory_order_relaxed) != 0
             ? global_hooks<const aoti::Point>().get()
             : nullptr;
}

/// The point `name` of the model this thread runs, when it has hooks of any kind to fire.
const aoti::Point* hooked_point(std::string_view name, const Run* run) {
  if (!run) return nullptr;
  const aoti::Point* point = run->model->find(name);
  if (!point) return nullptr;
  if (hooks_for(*point)->empty() &&
      global_hooks_active<const aoti::Point>().load(std::memory_order_relaxed) == 0) {
    return nullptr;
  }
  return point;
}

/// Runs `body` and records what it throws in the run, so that `Model::run` rethrows that
/// rather than the text AOTInductor's C interface turns it into.
template <class F>
decltype(auto) recording_errors(Run* run, F&& body) {
  try {
    return body();
  } catch (...) {
    if (run && !run->error) run->error = std::current_exception();
    throw;
  }
}

/// The forward hooks at an output point: `write` puts the final output into the graph, in place
/// or as new tensors.
template <class Write>
void fire_output(Run& run, const aoti::Point& point, at::TensorList xs, Write&& write) {
  Dispatch<const aoti::Point> dispatch(global_point_hooks(), hooks_for(point).get());
  Shown shown = shown_aliases(xs);
  std::optional<std::vector<at::Tensor>> replaced;
  run_keeping_valid(shown, xs, [&] {
    std::vector<c10::IValue> args;
    if (auto& saved = run.args[point.index()]) args = std::move(*saved);
    ShownValue output = point.single_output()
                            ? ShownValue::borrowing(shown[0])
                            : ShownValue(c10::ivalue::Tuple::create(
                                  std::vector<c10::IValue>(shown.begin(), shown.end())));
    if (dispatch.run_forward_hooks(point, args, output)) {
      replaced = replacement(point, "output", output.get(), xs, point.single_output());
    }
  });
  write(replaced ? &*replaced : nullptr);
}

void output_point_inplace(at::TensorList xs, const at::Tensor& /*token*/, c10::string_view name) {
  Run* run = current_run;
  const aoti::Point* point = hooked_point(std::string_view(name.data(), name.size()), run);
  if (!point) return;
  recording_errors(run, [&] {
    fire_output(*run, *point, xs, [&](std::vector<at::Tensor>* values) {
      if (!values) return;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        at::Tensor value = (*values)[i];
        if (overlaps(value, xs[i])) value = value.clone();
        const_cast<at::Tensor&>(xs[i]).copy_(value);
      }
    });
  });
}

void output_point_copying(at::TensorList xs, at::TensorList outs, const at::Tensor& /*token*/,
                          c10::string_view name) {
  Run* run = current_run;
  const aoti::Point* point = hooked_point(std::string_view(name.data(), name.size()), run);
  if (!point) return write_copies(outs, xs, nullptr);
  recording_errors(run, [&] {
    fire_output(*run, *point, xs,
                [&](std::vector<at::Tensor>* values) { write_copies(outs, xs, values); });
  });
}

void input_point(at::TensorList xs, at::TensorList outs, const at::Tensor& /*token*/,
                 c10::string_view name) {
  Run* run = current_run;
  const aoti::Point* point = hooked_point(std::string_view(name.data(), name.size()), run);
  if (!point) return write_copies(outs, xs, nullptr);
  recording_errors(run, [&] {
    Dispatch<const aoti::Point> dispatch(global_point_hooks(), hooks_for(*point).get());
    Shown shown = shown_aliases(xs);
    std::optional<std::vector<at::Tensor>> replaced;
    run_keeping_valid(shown, xs, [&] {
      std::vector<c10::IValue> args(shown.begin(), shown.end());
      if (dispatch.run_pre_hooks(*point, args)) {
        replaced = replacement(*point, "args", c10::ivalue::Tuple::create(args), xs, false);
      }
    });
    write_copies(outs, xs, replaced ? &*replaced : nullptr);
    if (dispatch.has_forward_hooks()) {
      // The graph may reuse the buffers of `outs` before the module's output point: its
      // forward hooks get copies.
      std::vector<c10::IValue> saved;
      saved.reserve(outs.size());
      for (const auto& t : outs) saved.emplace_back(t.clone());
      run->args[point->index()] = std::move(saved);
    }
  });
}

}  // namespace

AotiModel::AotiModel(std::string path_, std::size_t num_runners, const std::string& model_name,
                     int device_index)
    : path(std::move(path_)), runners(num_runners) {
  if (num_runners == 0) {
    fail<ValueError>("aoti.model.num_runners",
                     "modhooks: num_runners must be at least 1 (loading " + path + ")");
  }
  bool exists = false;
  if (!zip_file(path, exists)) {
    if (!exists) {
      fail<RuntimeError>("aoti.package.open_failed",
                         "modhooks: cannot open the AOTInductor package " + path);
    }
    fail<FormatError>(
        "aoti.package.not_a_package",
        "modhooks: " + path + " is not an AOTInductor package (.pt2): not a zip file");
  }
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, model_name, /*run_single_threaded=*/false, num_runners,
        static_cast<c10::DeviceIndex>(device_index));
  } catch (const std::exception& e) {
    fail<FormatError>("aoti.package.unloadable",
                      "modhooks: cannot load the AOTInductor package " + path + ": " + e.what());
  }
  read_points(loader->get_metadata());
}

void AotiModel::read_points(const std::unordered_map<std::string, std::string>& metadata) {
  auto abi = metadata.find(kAbiKey);
  if (abi == metadata.end()) return;  // compiled without modhooks' points
  if (abi->second != library_abi()) {
    fail<RuntimeError>("aoti.package.abi_mismatch",
                       "modhooks: " + path + " was exported for the modhooks ABI " + abi->second +
                           "; this library is " + library_abi() +
                           ": export it again with the matching modhooks Python package");
  }
  auto table = metadata.find(kPointsKey);
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(table == metadata.end() ? std::string("[]") : table->second);
    for (const auto& entry : parsed) {
      auto point = std::make_unique<aoti::Point>(
          entry.at("name").get<std::string>(), entry.value("type", std::string()),
          entry.value("inputs", false), entry.value("single", true), points.size());
      names.push_back(point->name());
      points.push_back(std::move(point));
    }
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>("aoti.package.bad_points",
                      "modhooks: the point table of " + path + " cannot be read: " + e.what());
  }
  for (const auto& p : points) by_name_.emplace(p->name(), p.get());
}

}  // namespace detail

namespace aoti {

Model::Model(const std::string& package_path, std::size_t num_runners,
             const std::string& model_name, int device_index)
    : impl_(std::make_unique<modhooks::detail::AotiModel>(package_path, num_runners, model_name,
                                                          device_index)) {}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

modhooks::detail::AotiModel& Model::live() const {
  if (!impl_) {
    modhooks::detail::fail<RuntimeError>(
        "aoti.model.moved_from",
        "modhooks: this aoti::Model was moved from; use the Model it was moved to");
  }
  return *impl_;
}

const std::vector<std::string>& Model::points() const { return live().names; }

const Point& Model::point(const std::string& name) const {
  const modhooks::detail::AotiModel& model = live();
  if (const Point* p = model.find(name)) return *p;
  std::string listed;
  for (const auto& n : model.names) listed += (listed.empty() ? "'" : ", '") + n + "'";
  modhooks::detail::fail<KeyError>(
      "aoti.model.no_point",
      "modhooks: " + model.path + " has no point '" + name + "'" +
          (listed.empty() ? std::string(": it was exported without points (modhooks.export)")
                          : "; its points are " + listed));
}

std::vector<at::Tensor> Model::run(const std::vector<at::Tensor>& inputs) {
  using modhooks::detail::Run;
  modhooks::detail::AotiModel& model = live();
  std::size_t serving = 0;  // this model's runs under way on this thread, each holding a runner
  for (const Run* r = modhooks::detail::current_run; r != nullptr; r = r->outer) {
    serving += r->model == &model ? 1 : 0;
  }
  if (serving >= model.runners) {
    modhooks::detail::fail<RuntimeError>(
        "aoti.model.reentrant_run",
        "modhooks: a hook ran " + model.path + " again while its " + std::to_string(model.runners) +
            " runner(s) serve runs on this thread, so the run would wait forever; load the "
            "Model with more runners (num_runners) or run another Model");
  }
  Run run{&model, modhooks::detail::current_run, nullptr, {}};
  run.args.resize(model.points.size());
  modhooks::detail::current_run = &run;
  struct Restore {
    Run& run;
    ~Restore() { modhooks::detail::current_run = run.outer; }
  } restore{run};
  try {
    return model.loader->run(inputs);
  } catch (const std::exception& e) {
    if (run.error) std::rethrow_exception(run.error);
    modhooks::detail::fail<RuntimeError>(
        "aoti.model.run_failed", "modhooks: running " + model.path + " failed: " + e.what());
  }
}

std::unordered_map<std::string, std::string> Model::metadata() const {
  return live().loader->get_metadata();
}

const std::string& Model::path() const { return live().path; }

}  // namespace aoti

MODHOOKS_END_NAMESPACE

// The hook-point operators, with the schemas python/modhooks/_ops.py declares for export. In
// the same unit as `Model`'s constructor, so that a static libmodhooks_aoti keeps this
// registration wherever a program loads a package.
TORCH_LIBRARY(modhooks, m) {
  m.def("output_point_(Tensor(a!)[] xs, Tensor(b!) token, str name) -> ()");
  m.def("output_point(Tensor[] xs, Tensor(a!)[] outs, Tensor(b!) token, str name) -> ()");
  m.def("input_point(Tensor[] xs, Tensor(a!)[] outs, Tensor(b!) token, str name) -> ()");
  m.impl("output_point_", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(modhooks::detail::output_point_inplace));
  m.impl("output_point", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(modhooks::detail::output_point_copying));
  m.impl("input_point", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(modhooks::detail::input_point));
}
