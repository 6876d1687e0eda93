// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// What the C++ rank programs of the parity runs share (ddp_parity, fsdp_parity): a mode's own
// failure, the check that a call raises modhooks::Error, and the main loop over the modes.
#pragma once

#include <modhooks/dist.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>

namespace rank_modes {

/// A mode's own failure (wrong hook count, no error where one was due), as opposed to an
/// exception of the code under test; both end the run with the mode named.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Runs `f`, which must raise modhooks::Error whose id starts with `id` (a whole id, or a prefix
/// such as "dist." where which call fails first may vary), whose text has the library's
/// "modhooks: " prefix, and which holds `text`.
template <class F>
void expect_error(const std::string& id, const std::string& text, F&& f) {
  try {
    f();
  } catch (const modhooks::Error& e) {
    const std::string what = e.what();
    if (std::string(e.id()).rfind(id, 0) != 0 || what.rfind("modhooks: ", 0) != 0 ||
        what.find(text) == std::string::npos) {
      throw Failure("wrong error: " + std::string(e.id()) + ": " + what);
    }
    std::cout << "rank " << modhooks::dist::get_rank() << " raised as expected: " << e.id() << ": "
              << what.substr(0, 200) << "\n";
    return;
  }
  throw Failure("no error, expected " + id);
}

/// `expect_error(id, "", f)`: any text with the prefix.
template <class F>
void expect_error(const std::string& id, F&& f) {
  expect_error(id, "", std::forward<F>(f));
}

/// `program <dir> <mode>...`: runs `run(mode, dir)` for each mode in one process group, printing
/// "mode <m>: done" (rank 0, once every rank finished it) or "mode <m>: FAILED ..." and exiting.
/// A mode after which the group is gone (a rank died in it) ends the run.
template <class Run>
int main_over_modes(int argc, char** argv, const char* program, Run&& run) {
  namespace dist = modhooks::dist;
  if (argc < 3) {
    std::cerr << "usage: " << program << " <dir> <mode>...\n";
    return 2;
  }
  const std::string dir = argv[1];
  // A rank left waiting for a dead one fails after this rather than Gloo's 30 minutes.
  dist::init_process_group(
      dist::InitOptions().backend("gloo").timeout(std::chrono::milliseconds(60000)));
  for (int i = 2; i < argc; ++i) {
    const std::string mode = argv[i];
    try {
      run(mode, dir);
    } catch (const std::exception& e) {
      // The other ranks may wait in a collective of this mode: exit, and torchrun stops them.
      std::cout << "mode " << mode << ": FAILED on rank " << dist::get_rank() << ": " << e.what()
                << std::endl;
      std::exit(1);
    }
    if (mode == "error_peer_died") return 0;
    // Rank 0's files are written before any rank starts the next mode or ends.
    dist::barrier();
    if (dist::get_rank() == 0) std::cout << "mode " << mode << ": done" << std::endl;
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace rank_modes
