// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/points/detail/shown.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/accumulate.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/error.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace {

/// The aliases of earlier firings on this thread that no hook kept: making a storage and a
/// tensor object for each shown tensor is a large part of what a firing costs, so `shown_alias`
/// points one of these at the new memory instead. Bounded: a thread keeps at most this many.
thread_local std::vector<at::Tensor> spare_aliases;
constexpr std::size_t kMaxSpareAliases = 64;

/// Whether nothing but `alias` itself owns it or its storage, strongly or weakly, and no hook
/// gave it autograd state: what a hook did to it is then gone with the firing.
bool unshared(const at::Tensor& alias) {
  const c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
  const c10::Storage& storage = impl->unsafe_storage();
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

/// A tensor with the keys, dtype and device given, over `nbytes` of memory at `data` that it
/// does not own, with a storage object of its own and no geometry yet: a spare alias where one
/// fits, else a new one (making a storage and a tensor object is a large part of what a firing
/// costs).
MODHOOKS_ALWAYS_INLINE inline at::Tensor alias_over(void* data, std::size_t nbytes,
                                                    c10::DispatchKeySet keys,
                                                    caffe2::TypeMeta dtype, c10::Device device) {
  c10::DataPtr memory(data, device);
  if (!spare_aliases.empty()) {
    at::Tensor alias = std::move(spare_aliases.back());
    spare_aliases.pop_back();
    // The device too: two GPUs have the same dispatch keys, and a tensor's device is fixed
    // when it is made.
    if (alias.key_set() == keys && alias.dtype() == dtype && alias.device() == device) {
      alias.unsafeGetTensorImpl()
          ->unsafe_storage()
          .unsafeGetStorageImpl()
          ->UniqueStorageShareExternalPointer(std::move(memory), nbytes);
      return alias;
    }
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(memory),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, dtype);
}

/// A tensor over `x`'s memory with a storage object of its own, which is what hooks see: the
/// compiled program reuses its buffers once a value is dead, so a hook that keeps what it got
/// (Python users do: `acts[name] = output`) would find other values there later. `keep_valid`
/// swaps the memory of this storage for a copy where a hook kept the tensor or a view of it;
/// where none did, nothing is copied and the alias goes back to `spare_aliases`.
at::Tensor shown_alias(const at::Tensor& x) {
  const c10::Storage& memory = x.storage();
  at::Tensor alias =
      alias_over(memory.mutable_data(), memory.nbytes(), x.key_set(), x.dtype(), x.device());
  c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
  // Consecutive points often show tensors of one geometry, and setting it anew recomputes the
  // contiguity flags: it is set only where it differs.
  if (impl->storage_offset() != x.storage_offset() || impl->sizes() != x.sizes() ||
      impl->strides() != x.strides()) {
    impl->set_sizes_and_strides(x.sizes(), x.strides(), x.storage_offset());
  }
  return alias;
}

/// The keys libtorch gives a dense CPU tensor it makes in inference mode or out of it (an
/// inference tensor has no autograd keys), so that a spare alias made in the other mode is not
/// reused.
c10::DispatchKeySet cpu_keys(bool inference) {
  if (inference) {
    static const c10::DispatchKeySet keys = [] {
      const c10::InferenceMode on;
      return at::empty({0}).key_set();
    }();
    return keys;
  }
  static const c10::DispatchKeySet keys = [] {
    const c10::InferenceMode off(/*enabled=*/false);
    return at::empty({0}).key_set();
  }();
  return keys;
}

}  // namespace

Aliases shown_aliases(at::TensorList xs) {
  Aliases shown;
  for (const auto& x : xs) shown.push_back(shown_alias(x));
  return shown;
}

Aliases tensors_over(const TensorView* views, std::size_t n, bool inference) {
  Aliases tensors;
  const c10::DispatchKeySet keys = cpu_keys(inference);
  for (std::size_t i = 0; i < n; ++i) {
    const TensorView& v = views[i];
    const at::IntArrayRef sizes(v.sizes.data(), v.dim);
    const caffe2::TypeMeta dtype = c10::scalarTypeToTypeMeta(static_cast<at::ScalarType>(v.dtype));
    const auto nbytes = static_cast<std::size_t>(c10::multiply_integers(sizes)) * dtype.itemsize();
    at::Tensor t = alias_over(v.data, nbytes, keys, dtype, c10::Device(c10::kCPU));
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->storage_offset() != 0) impl->set_storage_offset(0);
    if (impl->sizes() != sizes || !impl->is_contiguous()) impl->set_sizes_contiguous(sizes);
    tensors.push_back(std::move(t));
  }
  return tensors;
}

void give_back(Aliases& tensors) noexcept {
  for (at::Tensor& t : tensors) {
    // No hook saw these, so nothing but the firing's own code could share them: two counts,
    // rather than `unshared`'s whole check, say it did not.
    if (spare_aliases.size() < kMaxSpareAliases && t.use_count() == 1 &&
        t.unsafeGetTensorImpl()->unsafe_storage().use_count() == 1) {
      spare_aliases.push_back(std::move(t));
    }
  }
}

void keep_valid(Aliases& shown, at::TensorList xs, c10::string_view point, const char* failed_id) {
  std::size_t i = 0;
  try {
    for (; i < shown.size(); ++i) {
      at::Tensor& alias = shown[i];
      if (unshared(alias)) {
        if (spare_aliases.size() < kMaxSpareAliases) spare_aliases.push_back(std::move(alias));
        continue;
      }
      const c10::Storage& storage = alias.unsafeGetTensorImpl()->unsafe_storage();
      const auto nbytes = static_cast<std::int64_t>(storage.nbytes());
      auto bytes = at::TensorOptions().dtype(at::kByte).device(alias.device());
      at::Tensor copy = at::empty({nbytes}, bytes);
      copy.copy_(at::empty({0}, bytes).set_(xs[i].storage(), 0, {nbytes}, {1}));
      c10::DataPtr data = copy.storage().unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr());
      storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(data));
    }
  } catch (const std::exception& e) {
    const std::string failure = "modhooks: could not copy a tensor that a hook kept at point '" +
                                std::string(point) + "' out of the compiled program's memory (" +
                                e.what() + ")";
    // Left over the run's memory, these would show what the compiled model writes there later.
    // With no memory and libtorch's access check set, every read and write of them (and of
    // their views, which share the storage) raises this text instead.
    for (std::size_t j = i; j < shown.size(); ++j) {
      c10::StorageImpl* storage =
          shown[j].unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
      storage->set_data_ptr_noswap(c10::DataPtr(nullptr, shown[j].device()));
      storage->set_nbytes(0);
      storage->release_data_and_set_meta_custom_data_ptr_error_msg_(
          failure + ", so this tensor, kept by a hook there, holds no data");
    }
    fail<RuntimeError>(failed_id,
                       failure +
                           "; the tensors of that firing kept and not copied hold no data "
                           "now, and reading them raises");
  }
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
