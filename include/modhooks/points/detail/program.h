// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/points/detail/program_handle.h"
#include "modhooks/points/detail/replacement.h"
#include "modhooks/points/detail/table.h"
#include "modhooks/version.h"

// What every loaded compiled program is, whatever runs it (AOTInductor's loader, ExecuTorch's
// runtime): its path and its points by name, and the errors its public class raises. A kind's
// program class derives from `CompiledProgram<Program, Point>` and adds how it loads and runs.

MODHOOKS_BEGIN_NAMESPACE
namespace detail {

/// The error ids and names of a kind of compiled program (docs/errors.md): static strings.
struct ProgramWords {
  const char* program;        // the public class, as errors name it: "aoti::Model"
  const char* moved_from;     // "aoti.model.moved_from"
  const char* no_point;       // "aoti.model.no_point"
  const char* how_to_export;  // how to export with points, for a program exported without
  const char* run_failed;     // "aoti.model.run_failed"
  PointErrorIds point;        // its points' errors
};

/// A loaded program of the kind `Program` (which declares `static const ProgramWords words`)
/// with points of class `P`.
template <class Program, class P>
class CompiledProgram {
 public:
  using PointType = P;

  explicit CompiledProgram(std::string path_) : path(std::move(path_)) {}
  CompiledProgram(const CompiledProgram&) = delete;
  CompiledProgram& operator=(const CompiledProgram&) = delete;

  /// The point of module `name`, or null.
  const P* find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  /// The point of module `name`; KeyError `words.no_point` naming the program and its points.
  const P& point(const std::string& name) const {
    if (const P* p = find(name)) return *p;
    fail_no_point(path, name, names, Program::words.no_point, Program::words.how_to_export);
  }

  /// RuntimeError `words.run_failed`: the run failed with `e`, which no hook threw.
  [[noreturn]] void fail_run(const std::exception& e) const {
    fail<RuntimeError>(Program::words.run_failed,
                       "modhooks: running " + path + " failed: " + e.what());
  }

  std::string path;
  /// The exported module paths, in the order the program first reaches them.
  std::vector<std::string> names;

 protected:
  ~CompiledProgram() = default;

  /// Makes the points of the point table `json` (FormatError `bad_id` where it cannot be read).
  void read_points(const std::string& json, const char* bad_id) {
    for (PointEntry& entry : parse_point_table(json, path, bad_id)) {
      points_.push_back(std::make_unique<P>(std::move(entry.name), std::move(entry.type_name),
                                            entry.inputs, entry.single, points_.size()));
      names.push_back(points_.back()->name());
    }
    for (const auto& p : points_) by_name_.emplace(p->name(), p.get());
  }

 private:
  std::vector<std::unique_ptr<P>> points_;
  std::unordered_map<std::string_view, const P*> by_name_;
};

// The members of `ProgramHandle`, for the one source of each kind that instantiates it.

template <class Program, class P>
ProgramHandle<Program, P>::ProgramHandle(std::unique_ptr<Program> program) noexcept
    : program_(std::move(program)) {}
template <class Program, class P>
ProgramHandle<Program, P>::~ProgramHandle() = default;
template <class Program, class P>
ProgramHandle<Program, P>::ProgramHandle(ProgramHandle&&) noexcept = default;
template <class Program, class P>
ProgramHandle<Program, P>& ProgramHandle<Program, P>::operator=(ProgramHandle&&) noexcept = default;

template <class Program, class P>
Program& ProgramHandle<Program, P>::live() const {
  if (!program_) {
    const std::string program = Program::words.program;  // "aoti::Model"
    const std::string short_name = program.substr(program.rfind(':') + 1);
    fail<RuntimeError>(Program::words.moved_from, "modhooks: this " + program +
                                                      " was moved from; use the " + short_name +
                                                      " it was moved to");
  }
  return *program_;
}

template <class Program, class P>
const std::vector<std::string>& ProgramHandle<Program, P>::points() const {
  return live().names;
}

template <class Program, class P>
const P& ProgramHandle<Program, P>::point(const std::string& name) const {
  return live().point(name);
}

template <class Program, class P>
const std::string& ProgramHandle<Program, P>::path() const {
  return live().path;
}

}  // namespace detail
MODHOOKS_END_NAMESPACE
