// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/aoti/model.h"

#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "package.h"
#include "run.h"

template class modhooks::detail::ProgramHandle<modhooks::detail::AotiModel, modhooks::aoti::Point>;

MODHOOKS_BEGIN_NAMESPACE

namespace aoti {

Model::Model(const std::string& package_path, std::size_t num_runners,
             const std::string& model_name, int device_index)
    : ProgramHandle(std::make_unique<modhooks::detail::AotiModel>(package_path, num_runners,
                                                                  model_name, device_index)) {}

std::vector<at::Tensor> Model::run(const std::vector<at::Tensor>& inputs) {
  modhooks::detail::AotiModel& model = live();
  modhooks::detail::RunScope scope(model);
  try {
    return model.loader->run(inputs);
  } catch (const std::exception& e) {
    scope.fail(e);
  }
}

std::unordered_map<std::string, std::string> Model::metadata() const {
  return live().loader->get_metadata();
}

}  // namespace aoti

MODHOOKS_END_NAMESPACE
