// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
//
// DDP finds the tensors of every form a forward's output takes (Python's `_find_tensors`), on 2
// ranks over Gloo, started by `torchrun --no-python --nproc-per-node 2`
// (tests/dist/CMakeLists.txt). With `static_graph` the first step's all-reduce runs only through
// the `_DDPSink` over the tensors DDP found in the output; with `find_unused_parameters` the unused
// ones are those the output's tensors do not reach. A form whose tensors DDP missed leaves the
// first step unreduced (static_graph) or every gradient zeroed (find_unused) and the ranks apart.
//
// For each form and mode: a Linear in float64 returning the form, 3 SGD steps on each rank's own
// batch, then the parameters must be bitwise equal across the ranks and to one process training
// the bare model with the averaged gradient (0.5 * g0 + 0.5 * g1: exact in float64, and what the
// all-reduce of halves computes for 2 ranks).
#include <gtest/gtest.h>
#include <modhooks/dist.h>
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dist = modhooks::dist;

namespace user {

/// A user's output type: DDP finds its tensors through its `visit_tensors`, found by ADL.
struct Prediction {
  at::Tensor logits;
  std::array<at::Tensor, 1> aux;
  int64_t count = 0;
  std::string label;
};

template <class F>
void visit_tensors(Prediction& out, F& f) {
  f(out.logits);
  modhooks::dist::visit_tensors(out.aux, f);  // the library's forms, inside a user's type
}

}  // namespace user

namespace {

// Each form: `Out`, `make(a, b)` holding both tensors, and `loss(out)`, read without modhooks'
// traversal (it is what is under test).
at::Tensor loss_of(const at::Tensor& a, const at::Tensor& b) { return a.sum() + b.pow(2).sum(); }

struct Vector {  // the control: found before the fix too
  using Out = std::vector<at::Tensor>;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return {a, b}; }
  static at::Tensor loss(const Out& out) { return loss_of(out[0], out[1]); }
};
struct Array {
  using Out = std::array<at::Tensor, 2>;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return {a, b}; }
  static at::Tensor loss(const Out& out) { return loss_of(out[0], out[1]); }
};
struct Deque {
  using Out = std::deque<at::Tensor>;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return {a, b}; }
  static at::Tensor loss(const Out& out) { return loss_of(out[0], out[1]); }
};
struct List {
  using Out = std::list<at::Tensor>;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return {a, b}; }
  static at::Tensor loss(const Out& out) { return loss_of(out.front(), out.back()); }
};
/// The dict forms: `a` and `b` under "a" and "b".
template <class Dict>
struct DictForm {
  using Out = Dict;
  static Out make(const at::Tensor& a, const at::Tensor& b) {
    Out out;
    out.insert("a", a);
    out.insert("b", b);
    return out;
  }
};
struct C10Dict : DictForm<c10::Dict<std::string, at::Tensor>> {
  static at::Tensor loss(const Out& out) { return loss_of(out.at("a"), out.at("b")); }
};
struct C10List {
  using Out = c10::List<at::Tensor>;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return Out({a, b}); }
  static at::Tensor loss(const Out& out) { return loss_of(out.get(0), out.get(1)); }
};
struct OrderedDict : DictForm<torch::OrderedDict<std::string, at::Tensor>> {
  static at::Tensor loss(const Out& out) { return loss_of(out["a"], out["b"]); }
};
struct Nested {
  using Out = std::vector<std::array<at::Tensor, 2>>;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return {{a, at::Tensor()}, {b, b}}; }
  static at::Tensor loss(const Out& out) { return loss_of(out[0][0], out[1][0] + out[1][1]); }
};
struct WithLeaves {  // non-tensor leaves beside the tensors
  using Out = std::tuple<int, std::array<at::Tensor, 2>, std::string, double, c10::ScalarType>;
  static Out make(const at::Tensor& a, const at::Tensor& b) {
    return {3, {a, b}, "leaves", 0.5, at::kDouble};
  }
  static at::Tensor loss(const Out& out) {
    return loss_of(std::get<1>(out)[0], std::get<1>(out)[1]);
  }
};
struct UserStruct {
  using Out = user::Prediction;
  static Out make(const at::Tensor& a, const at::Tensor& b) { return {a, {b}, 2, "user"}; }
  static at::Tensor loss(const Out& out) { return loss_of(out.logits, out.aux[0]); }
};

template <class Form>
struct FormNetImpl : torch::nn::Module {
  FormNetImpl() : fc(register_module("fc", torch::nn::Linear(4, 3))) {}
  typename Form::Out forward(const at::Tensor& x) {
    const at::Tensor y = modhooks::call(fc, x);
    return Form::make(y, y * 3);
  }
  torch::nn::Linear fc;
};

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

constexpr int kSteps = 3;
constexpr double kLr = 0.02;

/// Rank `rank`'s batch of step `step`, the same on every rank.
at::Tensor batch(int rank, int step) {
  torch::manual_seed(1000 + 100 * step + rank);
  return torch::randn({5, 4}, at::kDouble);
}

template <class Form>
std::shared_ptr<FormNetImpl<Form>> make_net() {
  torch::manual_seed(7);
  auto net = std::make_shared<FormNetImpl<Form>>();
  net->to(at::kDouble);
  return net;
}

/// The parameters of the bare model trained in one process with the averaged gradient.
template <class Form>
std::vector<at::Tensor> reference(int world) {
  auto net = make_net<Form>();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLr));
  for (int step = 0; step < kSteps; ++step) {
    std::vector<at::Tensor> mean;
    for (int rank = 0; rank < world; ++rank) {
      opt.zero_grad();
      Form::loss(net->forward(batch(rank, step))).backward();
      const auto params = net->parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        at::Tensor share = params[i].grad() * (1.0 / world);
        if (rank == 0) {
          mean.push_back(share);
        } else {
          mean[i] = mean[i] + share;
        }
      }
    }
    const auto params = net->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = mean[i];
    opt.step();
  }
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

enum class Mode { kDefault, kStaticGraph, kFindUnused };
const char* name(Mode mode) {
  constexpr const char* kNames[] = {"default", "static_graph", "find_unused_parameters"};
  return kNames[static_cast<int>(mode)];
}

template <class Form>
void check(Mode mode) {
  SCOPED_TRACE(name(mode));
  const int rank = dist::get_rank(), world = dist::get_world_size();
  ASSERT_EQ(world, 2);
  auto net = make_net<Form>();
  dist::DDPOptions options;
  if (mode == Mode::kStaticGraph) options.static_graph(true);
  if (mode == Mode::kFindUnused) options.find_unused_parameters(true);
  dist::DistributedDataParallel ddp(net, options);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(kLr));
  for (int step = 0; step < kSteps; ++step) {
    ddp.zero_grad();
    Form::loss(ddp(batch(rank, step))).backward();
    opt.step();
  }

  const std::vector<at::Tensor> expected = reference<Form>(world);
  const auto params = net->parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    // Rank 0's parameter, on every rank.
    std::vector<at::Tensor> rank0{params[i].detach().clone()};
    ddp.process_group()->broadcast(rank0)->wait();
    EXPECT_TRUE(params[i].equal(rank0[0]))
        << "rank " << rank << " parts from rank 0 in parameter " << i << ": max |difference| "
        << max_difference(params[i], rank0[0]);
    EXPECT_TRUE(params[i].equal(expected[i]))
        << "rank " << rank << ", parameter " << i
        << " is not the averaged gradient's: max |difference| "
        << max_difference(params[i], expected[i]);
  }
}

template <class Form>
class DdpOutputs : public ::testing::Test {};
using Forms = ::testing::Types<Vector, Array, Deque, List, C10Dict, C10List, OrderedDict, Nested,
                               WithLeaves, UserStruct>;
class FormNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, Vector>) return "vector";
    if (std::is_same_v<T, Array>) return "array";
    if (std::is_same_v<T, Deque>) return "deque";
    if (std::is_same_v<T, List>) return "list";
    if (std::is_same_v<T, C10Dict>) return "c10_Dict";
    if (std::is_same_v<T, C10List>) return "c10_List";
    if (std::is_same_v<T, OrderedDict>) return "OrderedDict";
    if (std::is_same_v<T, Nested>) return "vector_of_array";
    if (std::is_same_v<T, WithLeaves>) return "tuple_with_leaves";
    return "user_struct";
  }
};
TYPED_TEST_SUITE(DdpOutputs, Forms, FormNames);

// Every rank runs every case in the same order (collectives in each); a failed expectation does
// not leave a case early, so the ranks stay in step.
TYPED_TEST(DdpOutputs, TrainsAsTheAveragedGradient) {
  for (Mode mode : {Mode::kDefault, Mode::kStaticGraph, Mode::kFindUnused}) check<TypeParam>(mode);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dist::init_process_group(
      dist::InitOptions().backend("gloo").timeout(std::chrono::milliseconds(60000)));
  const int result = RUN_ALL_TESTS();
  dist::destroy_process_group();
  return result;
}
