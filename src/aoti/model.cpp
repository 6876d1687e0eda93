// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/aoti/model.h"

#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/points/detail/table.h"
#include "package.h"
#include "run.h"

MODHOOKS_BEGIN_NAMESPACE

namespace aoti {

Model::Model(const std::string& package_path, std::size_t num_runners,
             const std::string& model_name, int device_index)
    : impl_(std::make_unique<modhooks::detail::AotiModel>(package_path, num_runners, model_name,
                                                          device_index)) {}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

modhooks::detail::AotiModel& Model::live() const {
  if (!impl_) {
    modhooks::detail::fail<RuntimeError>(
        "aoti.model.moved_from",
        "modhooks: this aoti::Model was moved from; use the Model it was moved to");
  }
  return *impl_;
}

const std::vector<std::string>& Model::points() const { return live().names; }

const Point& Model::point(const std::string& name) const {
  const modhooks::detail::AotiModel& model = live();
  if (const Point* p = model.find(name)) return *p;
  modhooks::detail::fail_no_point(model.path, name, model.names, "aoti.model.no_point",
                                  "modhooks.export");
}

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

const std::string& Model::path() const { return live().path; }

}  // namespace aoti

MODHOOKS_END_NAMESPACE
