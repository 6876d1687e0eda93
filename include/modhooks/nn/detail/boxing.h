// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/MaybeOwned.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "modhooks/core/detail/inline.h"
#include "modhooks/core/error.h"
#include "modhooks/dispatch/detail/dispatch.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// Converts typed `forward` arguments and results to the `c10::IValue`s hooks see, and back.
/// Types with no IValue form are shown to hooks as None and cannot be replaced by them.
template <class T, class = void>
struct Boxing {
  static constexpr bool value = false;
};

template <>
struct Boxing<at::Tensor> {
  static constexpr bool value = true;
  static c10::IValue box(const at::Tensor& t) { return t; }
  static at::Tensor unbox(const c10::IValue& v) { return v.toTensor(); }
};

template <>
struct Boxing<c10::IValue> {
  static constexpr bool value = true;
  static c10::IValue box(const c10::IValue& v) { return v; }
  static c10::IValue unbox(const c10::IValue& v) { return v; }
};

template <class T>
struct Boxing<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static constexpr bool value = true;
  static c10::IValue box(T v) { return static_cast<double>(v); }
  static T unbox(const c10::IValue& v) { return static_cast<T>(v.toDouble()); }
};

template <class T>
struct Boxing<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr bool value = true;
  static c10::IValue box(T v) { return static_cast<int64_t>(v); }
  static T unbox(const c10::IValue& v) { return static_cast<T>(v.toInt()); }
};

template <>
struct Boxing<bool> {
  static constexpr bool value = true;
  static c10::IValue box(bool v) { return v; }
  static bool unbox(const c10::IValue& v) { return v.toBool(); }
};

template <>
struct Boxing<std::string> {
  static constexpr bool value = true;
  static c10::IValue box(const std::string& v) { return v; }
  static std::string unbox(const c10::IValue& v) { return v.toStringRef(); }
};

template <>
struct Boxing<std::vector<at::Tensor>> {
  static constexpr bool value = true;
  static c10::IValue box(const std::vector<at::Tensor>& v) { return v; }
  static std::vector<at::Tensor> unbox(const c10::IValue& v) { return v.toTensorVector(); }
};

template <class T>
struct Boxing<std::optional<T>, std::enable_if_t<Boxing<T>::value>> {
  static constexpr bool value = true;
  static c10::IValue box(const std::optional<T>& v) {
    return v ? Boxing<T>::box(*v) : c10::IValue();
  }
  static std::optional<T> unbox(const c10::IValue& v) {
    if (v.isNone()) return std::nullopt;
    return Boxing<T>::unbox(v);
  }
};

template <class... Ts>
struct Boxing<std::tuple<Ts...>, std::enable_if_t<(Boxing<Ts>::value && ...)>> {
  static constexpr bool value = true;
  static c10::IValue box(const std::tuple<Ts...>& t) {
    return std::apply(
        [](const Ts&... e) { return c10::ivalue::Tuple::create({Boxing<Ts>::box(e)...}); }, t);
  }
  static std::tuple<Ts...> unbox(const c10::IValue& v) {
    const auto tuple = v.toTuple();
    const auto& elements = tuple->elements();
    if (elements.size() != sizeof...(Ts)) {
      fail<TypeError>("nn.hook.bad_tuple_size",
                      "a hook returned a tuple of " + std::to_string(elements.size()) +
                          " elements where forward returns " + std::to_string(sizeof...(Ts)));
    }
    return unbox_elements(elements, std::index_sequence_for<Ts...>{});
  }

 private:
  template <class Elements, std::size_t... I>
  static std::tuple<Ts...> unbox_elements(const Elements& e, std::index_sequence<I...>) {
    return std::tuple<Ts...>(Boxing<Ts>::unbox(e[I])...);
  }
};

template <class T>
c10::IValue box(const T& value) {
  if constexpr (Boxing<T>::value) {
    return Boxing<T>::box(value);
  } else {
    return c10::IValue();
  }
}

/// Writes `boxed` back into `value` when the type allows it; other values stay as they were.
template <class T>
void unbox_into(const c10::IValue& boxed, T& value) {
  if constexpr (Boxing<T>::value) value = Boxing<T>::unbox(boxed);
}

template <class... Ts>
std::vector<c10::IValue> box_all(const std::tuple<Ts...>& values) {
  std::vector<c10::IValue> boxed;
  boxed.reserve(sizeof...(Ts));
  std::apply([&](const Ts&... v) { (boxed.push_back(box(v)), ...); }, values);
  return boxed;
}

/// Makes `args` `n` Nones, out of the hooked call's way (a vector of another call's size).
MODHOOKS_COLD void resize_shown_args(std::vector<c10::IValue>& args, std::size_t n);

/// The `args` hooks see: forward's arguments `values` (a tuple of values or references), boxed,
/// with tensors borrowed (see `ShownValue`) from `values`, which outlive the showing, in a vector
/// the caller lends (nn's call cache keeps one per slot, between calls at the size of its last
/// one, its elements None), so that a hooked call neither allocates nor calls out of line to fill
/// it. Which elements are borrowed is known from the types, so showing and hiding are a few stores
/// per argument. Empty until `show`, and again after `hide`: a call shows its arguments only to
/// the hooks that run.
template <class Tuple>
class ShownArgs {
  struct Nothing {};
  static constexpr std::size_t kSize = std::tuple_size_v<Tuple>;
  template <std::size_t I>
  static constexpr bool kBorrowed =
      std::is_same_v<std::decay_t<std::tuple_element_t<I, Tuple>>, at::Tensor>;
  template <std::size_t... I>
  static constexpr bool all_borrowed(std::index_sequence<I...>) {
    return (kBorrowed<I> && ...);
  }
  static constexpr bool kAllBorrowed = all_borrowed(std::make_index_sequence<kSize>{});

 public:
  /// Shows in `storage`, which holds Nones only and outlives this.
  explicit ShownArgs(std::vector<c10::IValue>& storage) noexcept : storage_(storage) {}
  /// Shows `values`; nothing may be shown already.
  MODHOOKS_ALWAYS_INLINE void show(const Tuple& values) {
    if (MODHOOKS_UNLIKELY(storage_.size() != kSize)) resize_shown_args(storage_, kSize);
    shown_ = true;
    if constexpr (kAllBorrowed) {
      fill(values, std::make_index_sequence<kSize>{});
    } else {
      filled_ = 0;
      try {
        fill(values, std::make_index_sequence<kSize>{});
      } catch (...) {
        hide();
        throw;
      }
    }
  }
  /// Leaves the vector Nones again, if anything is shown.
  MODHOOKS_ALWAYS_INLINE void hide() noexcept {
    if (MODHOOKS_LIKELY(shown_)) clear(std::make_index_sequence<kSize>{});
    shown_ = false;
  }
  ShownArgs(const ShownArgs&) = delete;
  ShownArgs& operator=(const ShownArgs&) = delete;
  MODHOOKS_ALWAYS_INLINE ~ShownArgs() { hide(); }

  const std::vector<c10::IValue>& get() const noexcept { return storage_; }

 private:
  template <std::size_t... I>
  MODHOOKS_ALWAYS_INLINE void fill(const Tuple& values, std::index_sequence<I...>) {
    (put<I>(std::get<I>(values)), ...);
  }

  /// Each slot holds None, whose destructor does nothing, so the value is constructed over it.
  template <std::size_t I, class T>
  MODHOOKS_ALWAYS_INLINE void put(const T& value) {
    c10::IValue* slot = storage_.data() + I;
    if constexpr (kBorrowed<I>) {
      new (slot) c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(value));
    } else {
      new (slot) c10::IValue(box(value));
    }
    if constexpr (!kAllBorrowed) filled_ = I + 1;
  }

  /// Leaves every slot None again: a borrowed tensor forgotten without a release, an owned value
  /// released.
  template <std::size_t... I>
  MODHOOKS_ALWAYS_INLINE void clear(std::index_sequence<I...>) noexcept {
    (clear_one<I>(), ...);
  }
  template <std::size_t I>
  MODHOOKS_ALWAYS_INLINE void clear_one() noexcept {
    if constexpr (!kAllBorrowed) {
      if (I >= filled_) return;
    }
    c10::IValue& slot = storage_[I];
    if constexpr (kBorrowed<I>) {
      c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(slot);
    } else {
      c10::IValue released = std::move(slot);
    }
  }

  std::vector<c10::IValue>& storage_;
  bool shown_ = false;
  /// Slots filled so far, where an owned value's boxing may throw (tensors alone cannot).
  [[no_unique_address]] std::conditional_t<kAllBorrowed, Nothing, std::size_t> filled_{};
};

template <class... Ts>
void unbox_all(const std::vector<c10::IValue>& boxed, std::tuple<Ts...>& values) {
  if (boxed.size() != sizeof...(Ts)) {
    fail<TypeError>("nn.hook.bad_argument_count",
                    "forward pre-hook returned " + std::to_string(boxed.size()) +
                        " arguments, but forward takes " + std::to_string(sizeof...(Ts)));
  }
  std::size_t i = 0;
  std::apply([&](Ts&... v) { (unbox_into(boxed[i++], v), ...); }, values);
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
