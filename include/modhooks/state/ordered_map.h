// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE

/// \addtogroup api_state
/// @{

/// Python's `OrderedDict[str, V]`: string keys in insertion order with O(1) lookup.
///
/// Entries live in a vector, in insertion order, beside a hash index from key to position.
/// `erase` leaves a tombstone, so it is O(1) and invalidates only iterators to the erased entry
/// (erasing while iterating is safe, unlike Python); tombstones are swept by the next insertion
/// once they outnumber the live entries, which keeps every operation amortised O(1).
///
/// **Example**:
/// \code
///   modhooks::OrderedMap<int> m;
///   m.insert_or_assign("b", 2);
///   m.insert_or_assign("a", 1);
///   for (const auto& [key, value] : m) std::cout << key << "\n";  // b, then a
/// \endcode
template <class V>
class OrderedMap {
 public:
  /// What iteration yields: a key and its value.
  using value_type = std::pair<const std::string, V>;

 private:
  using Slot = std::optional<value_type>;

  template <class SlotIt, class Ref>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = OrderedMap::value_type;
    using difference_type = std::ptrdiff_t;
    using reference = Ref;
    using pointer = std::remove_reference_t<Ref>*;

    Iter() = default;
    Iter(SlotIt it, SlotIt end) : it_(it), end_(end) { skip(); }
    /// iterator -> const_iterator.
    template <class OtherIt, class OtherRef>
    Iter(const Iter<OtherIt, OtherRef>& other) : it_(other.it_), end_(other.end_) {}

    reference operator*() const { return **it_; }
    pointer operator->() const { return &**it_; }
    Iter& operator++() {
      ++it_;
      skip();
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++*this;
      return old;
    }
    friend bool operator==(const Iter& a, const Iter& b) { return a.it_ == b.it_; }
    friend bool operator!=(const Iter& a, const Iter& b) { return a.it_ != b.it_; }

   private:
    template <class, class>
    friend class Iter;
    void skip() {
      while (it_ != end_ && !it_->has_value()) ++it_;
    }
    SlotIt it_{};
    SlotIt end_{};
  };

 public:
  /// A forward iterator over the entries in insertion order.
  using iterator = Iter<typename std::vector<Slot>::iterator, value_type&>;
  /// The same, const.
  using const_iterator = Iter<typename std::vector<Slot>::const_iterator, const value_type&>;

  /// Whether `key` is present (Python's `key in d`).
  ///
  /// **Example**:
  /// \code
  ///   if (sd.contains("fc.weight")) std::cout << sd.at("fc.weight").sizes() << "\n";
  /// \endcode
  bool contains(const std::string& key) const { return index_.count(key) != 0; }

  /// The value of `key` (Python's `d[key]`). Throws modhooks::Error naming the key when it is
  /// absent (Python's KeyError).
  ///
  /// **Example**:
  /// \code
  ///   at::Tensor& weight = sd.at("fc.weight");
  /// \endcode
  V& at(const std::string& key) { return slots_[position(key)]->second; }
  /// The same, const. \see \ref api_state
  const V& at(const std::string& key) const { return slots_[position(key)]->second; }

  /// The entry of `key`, or `end()` when it is absent.
  ///
  /// **Example**:
  /// \code
  ///   auto it = sd.find("fc.bias");
  ///   if (it != sd.end()) it->second.zero_();
  /// \endcode
  iterator find(const std::string& key) {
    auto found = index_.find(key);
    if (found == index_.end()) return end();
    return iterator(slots_.begin() + static_cast<std::ptrdiff_t>(found->second), slots_.end());
  }
  /// The same, const. \see \ref api_state
  const_iterator find(const std::string& key) const {
    auto found = index_.find(key);
    if (found == index_.end()) return end();
    return const_iterator(slots_.begin() + static_cast<std::ptrdiff_t>(found->second),
                          slots_.end());
  }

  /// Replaces the value in place when the key exists (its position is kept, as in Python),
  /// appends otherwise.
  ///
  /// **Example**:
  /// \code
  ///   sd.insert_or_assign("fc.bias", torch::zeros({2}));
  /// \endcode
  void insert_or_assign(const std::string& key, V value) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      slots_[found->second]->second = std::move(value);
      return;
    }
    if (tombstones_ > index_.size()) sweep();
    index_.emplace(key, slots_.size());
    slots_.emplace_back(std::in_place, key, std::move(value));
  }

  /// Removes `key` (Python's `d.pop(key, None)`); returns whether it was present.
  ///
  /// **Example**:
  /// \code
  ///   bool was_there = sd.erase("fc.bias");
  /// \endcode
  bool erase(const std::string& key) {
    auto found = index_.find(key);
    if (found == index_.end()) return false;
    slots_[found->second].reset();
    index_.erase(found);
    ++tombstones_;
    return true;
  }

  /// Removes every entry. \see \ref api_state
  void clear() {
    slots_.clear();
    index_.clear();
    tombstones_ = 0;
  }
  /// Makes room for `n` entries without reallocation. \see \ref api_state
  void reserve(std::size_t n) {
    slots_.reserve(n);
    index_.reserve(n);
  }

  /// The number of entries. \see \ref api_state
  std::size_t size() const { return index_.size(); }
  /// Whether there are none. \see \ref api_state
  bool empty() const { return index_.empty(); }

  /// The keys in insertion order (a copy, so the map may change while they are walked).
  ///
  /// **Example**:
  /// \code
  ///   for (const std::string& key : sd.keys()) {
  ///     if (key.rfind("aux.", 0) == 0) sd.erase(key);
  ///   }
  /// \endcode
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(size());
    for (const auto& entry : *this) out.push_back(entry.first);
    return out;
  }

  /// The first entry, in insertion order.
  ///
  /// **Example**:
  /// \code
  ///   for (auto& [key, tensor] : sd) tensor = tensor.to(torch::kHalf);
  /// \endcode
  iterator begin() { return iterator(slots_.begin(), slots_.end()); }
  /// Past the last entry. \see begin()
  iterator end() { return iterator(slots_.end(), slots_.end()); }
  /// The same, const. \see begin()
  const_iterator begin() const { return const_iterator(slots_.begin(), slots_.end()); }
  /// The same, const. \see begin()
  const_iterator end() const { return const_iterator(slots_.end(), slots_.end()); }

 private:
  std::size_t position(const std::string& key) const {
    auto found = index_.find(key);
    if (found == index_.end())
      detail::fail<KeyError>("state.state_dict.missing_key", "key '" + key + "' not found");
    return found->second;
  }

  /// Drops the tombstones and renumbers the index; keys are copied because they are const.
  void sweep() {
    std::vector<Slot> live;
    live.reserve(index_.size() + 1);
    for (auto& slot : slots_) {
      if (!slot) continue;
      index_[slot->first] = live.size();
      live.emplace_back(std::in_place, slot->first, std::move(slot->second));
    }
    slots_ = std::move(live);
    tombstones_ = 0;
  }

  std::vector<Slot> slots_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t tombstones_ = 0;
};

/// @}

MODHOOKS_END_NAMESPACE
