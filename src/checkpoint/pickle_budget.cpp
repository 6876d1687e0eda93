// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// The unpickler's one budget and the error every part of it raises, which names the offset.
#include "pickle_budget.h"

#include <string>

#include "modhooks/core/error.h"
#include "modhooks/version.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {

void pickle_error(std::size_t op_offset, const char* id, const std::string& message) {
  fail<FormatError>(id, "data.pkl offset " + std::to_string(op_offset) + ": " + message);
}

void PickleBudget::refuse() const {
  pickle_error(op_offset_, "checkpoint.pickle.over_budget",
               "the pickle's objects and tensor data would take more than the " +
                   std::to_string(limit_) + " bytes a load of this file may hold (" + rule_ + ")");
}

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
