// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "byte_io.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {

/// A hash table entry's bytes beyond its value: the node's link and cached hash, and the bucket
/// array, which is up to twice as large as the table and held twice while it is rehashed.
constexpr std::uint64_t kHashEntryBytes = 16 + 32;

/// A pickle that cannot be read is a FormatError: `id` says what is wrong, the text where (the
/// offset of the opcode that found it). One function, so that the machine, what its opcodes
/// make and the budget's refusal all say where alike.
[[noreturn]] void pickle_error(std::size_t op_offset, const char* id, const std::string& message);

/// The one account of what an unpickling holds, in bytes (unpickler.h says what it covers).
///
/// Every allocation is charged in full before it is made; only an allocation known to be freed
/// already (a vector's old buffer, a temporary) is refunded, so what the load holds at any
/// moment stays within the limit. Objects that the memo, a container or the stack may still
/// reach are never refunded.
class PickleBudget {
 public:
  /// `rule` says how the caller set `limit`, for the error; `op_offset` is the machine's offset
  /// of the opcode it runs, which the error names. Both must outlive the budget.
  PickleBudget(std::uint64_t limit, const std::string& rule, const std::size_t& op_offset)
      : left_(limit), limit_(limit), rule_(rule), op_offset_(op_offset) {}

  /// What is left; after the unpickling, with its result still held (PickleEnd::budget_left).
  std::uint64_t left() const { return left_; }

  /// Counts an allocation of `bytes`, before it is made; refuses it when it is over what is left.
  /// Inline, with the refusal out of line: strings, containers and stack growth all charge.
  void charge(std::uint64_t bytes) {
    if (bytes > left_) refuse();
    left_ -= bytes;
  }
  /// Charges an array of `count` items of `size` bytes, refusing counts whose size overflows.
  void charge_array(std::uint64_t count, std::uint64_t size) {
    std::uint64_t bytes = 0;
    if (mul_overflows(count, size, &bytes)) charge(~std::uint64_t{0});
    charge(bytes);
  }
  template <class T>
  void charge_items(std::uint64_t count) {
    charge_array(count, sizeof(T));
  }
  /// Gives back `bytes` of an allocation that is freed.
  void refund(std::uint64_t bytes) { left_ += bytes; }

  /// Lets `v` take `n` more items, growing it by doubling, as push_back would, but charged.
  template <class T>
  void make_room(std::vector<T>& v, std::uint64_t n) {
    if (v.capacity() - v.size() >= n) return;
    std::uint64_t wanted = std::max<std::uint64_t>({v.size() + n, 2 * v.capacity(), 8});
    const std::uint64_t old_capacity = v.capacity();
    charge_items<T>(wanted);
    v.reserve(static_cast<std::size_t>(wanted));
    refund(old_capacity * sizeof(T));  // the old buffer, freed by reserve
  }
  /// Frees `v`'s buffer and refunds it. Its items are destroyed, but what they referred to stays
  /// charged: something else may still hold it.
  template <class T>
  void free_vector(std::vector<T>& v) {
    const std::uint64_t bytes = v.capacity() * sizeof(T);
    std::vector<T>().swap(v);
    refund(bytes);
  }

  /// Refunds `bytes` when it goes out of scope: for temporaries freed by then, so it is declared
  /// before them.
  class ScopedRefund {
   public:
    explicit ScopedRefund(PickleBudget& budget) : budget_(budget) {}
    ScopedRefund(const ScopedRefund&) = delete;
    ScopedRefund& operator=(const ScopedRefund&) = delete;
    ~ScopedRefund() { budget_.refund(bytes); }
    std::uint64_t bytes = 0;

   private:
    PickleBudget& budget_;
  };

 private:
  /// The over-budget error: the limit, and how the caller set it.
  [[noreturn]] void refuse() const;

  std::uint64_t left_;
  const std::uint64_t limit_;
  const std::string& rule_;
  const std::size_t& op_offset_;
};

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
