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

/// What forward hooks see of `value`: its boxed form; a tensor is borrowed (see `ShownValue`).
template <class T>
ShownValue show(const T& value) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return ShownValue::borrowing(value);
  } else {
    return ShownValue(box(value));
  }
}

/// The `args` forward hooks see: forward's arguments boxed, tensors borrowed (see `ShownValue`)
/// from `values`, which outlive it. Each thread keeps one vector for this, so that a hooked call
/// allocates nothing; a call nested inside a hook, which finds it in use, takes its own.
class ShownArgs {
 public:
  template <class Tuple>
  MODHOOKS_ALWAYS_INLINE explicit ShownArgs(const Tuple& values) {
    Buffer& buffer = thread_buffer();
    if (!buffer.busy) {
      buffer.busy = true;
      buffer_ = &buffer;
      args_ = &buffer.args;
    }
    try {
      // Written out rather than std::apply and an unconditional reserve, which stay calls.
      if (args_->capacity() < std::tuple_size_v<Tuple>) args_->reserve(std::tuple_size_v<Tuple>);
      push_all(values, std::make_index_sequence<std::tuple_size_v<Tuple>>{});
    } catch (...) {
      release();
      throw;
    }
  }
  ShownArgs(const ShownArgs&) = delete;
  ShownArgs& operator=(const ShownArgs&) = delete;
  MODHOOKS_ALWAYS_INLINE ~ShownArgs() { release(); }

  const std::vector<c10::IValue>& get() const noexcept { return *args_; }

 private:
  struct Buffer {
    std::vector<c10::IValue> args;
    bool busy = false;
  };
  static Buffer& thread_buffer() noexcept {
    static thread_local Buffer buffer;
    return buffer;
  }

  /// Forgets the borrowed tensors without releasing them and frees the thread's vector.
  MODHOOKS_ALWAYS_INLINE void release() noexcept {
    for (std::size_t i = 0; i < args_->size() && i < 64; ++i) {
      if (borrowed_ >> i & 1) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow((*args_)[i]);
    }
    args_->clear();
    if (buffer_) buffer_->busy = false;
  }

  template <class Tuple, std::size_t... I>
  MODHOOKS_ALWAYS_INLINE void push_all(const Tuple& values, std::index_sequence<I...>) {
    (push(std::get<I>(values)), ...);
  }

  template <class T>
  MODHOOKS_ALWAYS_INLINE void push(const T& value) {
    if constexpr (std::is_same_v<T, at::Tensor>) {
      if (args_->size() < 64) {
        borrowed_ |= std::uint64_t{1} << args_->size();
        args_->emplace_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(value));
        return;
      }
    }
    args_->push_back(box(value));
  }

  std::vector<c10::IValue> own_;  // used when the thread's vector is busy
  std::vector<c10::IValue>* args_ = &own_;
  Buffer* buffer_ = nullptr;
  std::uint64_t borrowed_ = 0;  // bit i: (*args_)[i] is borrowed
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
