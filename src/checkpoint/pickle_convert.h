// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <ATen/core/ivalue.h>

#include "modhooks/state/state_dict.h"
#include "modhooks/version.h"
#include "pickle_budget.h"
#include "pickle_value.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {

// The conversions of the machine's result, run after its STOP (the stack and memo are freed by
// then, so a container's reference count says how often the object refers to it). What they
// allocate is charged to the same budget as the unpickling, whose over-budget error names the
// STOP's offset.

/// The state dict `result` describes (pickle_state_dict.cpp): a dict of str keys and tensors,
/// with an OrderedDict's `_metadata` as the modules' metadata.
StateDict state_dict_of(const Value& result, PickleBudget& budget);

/// `result` as an IValue (pickle_ivalue.cpp), as unpickle_object (unpickler.h) describes it.
c10::IValue ivalue_of(const Value& result, PickleBudget& budget);

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
