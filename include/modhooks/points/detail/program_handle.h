// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// What the public class of every kind of compiled program is (`aoti::Model`,
/// `executorch::Program`): the loaded program, its points and its hooks, owned alone and moved
/// whole. Its members are defined in modhooks/points/detail/program.h and instantiated in the
/// kind's library, where `Program` is complete.
template <class Program, class P>
class ProgramHandle {
 public:
  /// Takes `other`'s program, points and hooks; `other` is left without a program, and every
  /// call on it but assignment and destruction throws `RuntimeError` (the kind's `moved_from`
  /// id: `aoti.model.moved_from`, `executorch.program.moved_from`).
  ProgramHandle(ProgramHandle&& other) noexcept;
  /// Takes `other`'s program, points and hooks; this object's own go.
  ProgramHandle& operator=(ProgramHandle&& other) noexcept;
  ProgramHandle(const ProgramHandle&) = delete;
  ProgramHandle& operator=(const ProgramHandle&) = delete;

  /// The exported module paths, in the order the program first reaches them; empty for a
  /// program exported without points.
  const std::vector<std::string>& points() const;
  /// The point of module `name`; `KeyError` (the kind's `no_point` id: `aoti.model.no_point`,
  /// `executorch.program.no_point`) naming the program and its points where it has none.
  const P& point(const std::string& name) const;
  /// The program's path, as given.
  const std::string& path() const;

 protected:
  explicit ProgramHandle(std::unique_ptr<Program> program) noexcept;
  ~ProgramHandle();
  /// The program, or the `moved_from` error where this object was moved from.
  Program& live() const;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace detail
MODHOOKS_END_NAMESPACE
