// SPDX-License-Identifier: BSD-3-Clause
// A training run handed from Python to C++ and back to Python.
//
// Python (resume_training.py start) trained three steps and saved what training scripts save:
//   torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
//               "losses": losses}, "python.pt")
// This program resumes that run in libtorch (the model's weights, Adam's moments and step
// counts, its hyper-parameters), trains three more steps and saves the same layout, which
// Python (resume_training.py finish) resumes for the last three steps: the nine losses are those
// of one uninterrupted run.
//
// Usage: resume_training <dir>   (<dir> holds what resume_training.py start wrote)
#include <ATen/Parallel.h>
#include <ATen/ops/mse_loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <cstdio>
#include <exception>
#include <string>

#include "modhooks/modhooks.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir written by resume_training.py start>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  at::set_num_threads(1);
  try {
    // The checkpoint as Python wrote it: a dict of the model's state dict, the optimizer's
    // state, the epoch and the losses so far.
    const auto ckpt = modhooks::load_object(dir + "/python.pt").toGenericDict();
    const auto data = modhooks::load_object(dir + "/data.pt").toGenericDict();

    torch::nn::Sequential model(torch::nn::Linear(2, 16), torch::nn::Tanh(),
                                torch::nn::Linear(16, 1));
    modhooks::load_state_dict(model, modhooks::StateDict::from(ckpt.at("model")));
    // lr and weight decay come from the checkpoint, as Python's load_state_dict restores them.
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions());
    modhooks::optim::load_state_dict(adam, ckpt.at("optimizer"));
    const std::int64_t epoch = ckpt.at("epoch").toInt();
    c10::List<double> losses = ckpt.at("losses").toDoubleList();

    const at::Tensor x = data.at("x").toTensor();
    const at::Tensor y = data.at("y").toTensor();
    const std::int64_t last = epoch + 3;
    for (std::int64_t step = epoch; step < last; ++step) {
      adam.zero_grad();
      const at::Tensor loss = at::mse_loss(model->forward(x[step]), y[step]);
      loss.backward();
      adam.step();
      losses.push_back(loss.item<double>());
      std::printf("C++ step %lld: loss %.6f\n", static_cast<long long>(step + 1),
                  loss.item<double>());
    }

    c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
    out.insert("model", modhooks::state_dict(model).to_ivalue());
    out.insert("optimizer", modhooks::optim::state_dict(adam));
    out.insert("epoch", last);
    out.insert("losses", losses);
    modhooks::save_object(out, dir + "/cpp.pt");
    std::printf("resume_training: saved %s/cpp.pt at epoch %lld\n", dir.c_str(),
                static_cast<long long>(last));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume_training: %s\n", e.what());
    return 1;
  }
  return 0;
}
