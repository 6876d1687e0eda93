// SPDX-License-Identifier: BSD-3-Clause
// DistributedDataParallel over a model whose forward returns a type with no known way to find its
// tensors, one per MODHOOKS_CASE: each must fail to compile with the static_assert that names the
// customisation point, never train with "no tensors" found (tests/compile_fail/check.cmake).
// MODHOOKS_CASE 0 is the control: outputs whose tensors DDP finds, and leaves that hold none.
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#ifndef MODHOOKS_CASE
#error "MODHOOKS_CASE must be defined"
#endif

namespace user {

/// Tensors DDP cannot see into: no visit_tensors for it.
struct Opaque {
  at::Tensor value;
};

/// Tensors DDP finds through the customisation point.
struct Visible {
  at::Tensor value;
  std::vector<at::Tensor> more;
};
template <class F>
void visit_tensors(Visible& out, F& f) {
  f(out.value);
  modhooks::dist::visit_tensors(out.more, f);
}

}  // namespace user

template <class Out>
struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(4, 3))) {}
  Out forward(const at::Tensor& x) {
    (void)modhooks::call(fc, x);
    return Out{};  // compiled, never run
  }
  torch::nn::Linear fc;
};

template <class Out>
void train(const at::Tensor& x) {
  auto net = std::make_shared<NetImpl<Out>>();
  modhooks::dist::DistributedDataParallel ddp(net);
  (void)ddp(x);
}

void cases(const at::Tensor& x) {
#if MODHOOKS_CASE == 0
  train<at::Tensor>(x);
  train<std::array<at::Tensor, 1>>(x);
  train<user::Visible>(x);
  train<std::tuple<at::Tensor, int, double, std::string, c10::ScalarType>>(x);
  train<std::vector<std::pair<std::array<at::Tensor, 1>, int64_t>>>(x);
#elif MODHOOKS_CASE == 1
  train<user::Opaque>(x);  // a user's type without visit_tensors
#elif MODHOOKS_CASE == 2
  train<std::vector<std::pair<user::Opaque, int>>>(x);  // the same, nested in known forms
#endif
}
