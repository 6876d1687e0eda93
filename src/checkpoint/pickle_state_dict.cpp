// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
// The pickle machine's result as a StateDict (unpickle_state_dict): its tensors under their
// keys, and the `_metadata` torch.save keeps on the OrderedDict as the modules' metadata.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>

#include "modhooks/core/error.h"
#include "modhooks/version.h"
#include "pickle_convert.h"

MODHOOKS_BEGIN_NAMESPACE
namespace detail {
namespace pickle {
namespace {

/// One entry of an OrderedMap (StateDict, its metadata) that holds `value_bytes` per slot: the
/// slot, which doubling may hold three times over while it grows, the index's hash entry, and
/// the key twice.
void charge_map_entry(PickleBudget& budget, const std::string& key, std::uint64_t value_bytes) {
  budget.charge(3 * (sizeof(std::string) + value_bytes + 8) + sizeof(std::string) + 8 +
                kHashEntryBytes + 2 * (key.size() + 1));
}

/// One integer of a module's metadata, `value` at the place `where` names in error texts.
void add_metadata(PickleBudget& budget, Metadata& md, const std::string& where,
                  const std::string& name, const Value& value) {
  if (value.tag != Tag::kInt && value.tag != Tag::kBool) {
    fail<TypeError>("checkpoint.load.bad_metadata",
                    where + " is a " + tag_name(value.tag) + ", not an int");
  }
  // A tree node: three links and a colour, the key and the value, the key's heap block.
  budget.charge(4 * sizeof(void*) + sizeof(std::string) + sizeof(std::int64_t) + name.size() + 1);
  md[name] = value.number;
}

/// The metadata of the module at `prefix`: `entry`, a dict of ints, or of dicts of ints one
/// level deep as spectral_norm writes them ({'spectral_norm': {'weight.version': 1}}), which
/// are flattened to "spectral_norm/weight.version".
Metadata module_metadata(PickleBudget& budget, const std::string& prefix, const Value& entry) {
  Metadata md;
  for (std::size_t j = 0; j < entry.items->items.size(); j += 2) {
    const Value& name_key = entry.items->items[j];
    if (name_key.tag != Tag::kStr) {
      fail<TypeError>("checkpoint.load.bad_metadata",
                      "_metadata['" + prefix + "'] key " + key_text(name_key) + " is not a str");
    }
    const std::string& name = name_key.str();
    const Value& value = entry.items->items[j + 1];
    if (value.tag != Tag::kDict) {
      add_metadata(budget, md, "_metadata['" + prefix + "']['" + name + "']", name, value);
      continue;
    }
    for (std::size_t k = 0; k < value.items->items.size(); k += 2) {
      const Value& inner_key = value.items->items[k];
      const Value& inner = value.items->items[k + 1];
      const std::string where = "_metadata['" + prefix + "']['" + name + "']";
      if (inner_key.tag != Tag::kStr) {
        fail<TypeError>("checkpoint.load.bad_metadata",
                        where + " key " + key_text(inner_key) + " is not a str");
      }
      add_metadata(budget, md, where + "['" + inner_key.str() + "']",
                   name + kNestedMetadataSeparator + inner_key.str(), inner);
    }
  }
  return md;
}

/// Reads the OrderedDict's `_metadata` (a dict by BUILD's check) into `sd`'s metadata.
void read_metadata(PickleBudget& budget, const Value& metadata, StateDict& sd) {
  for (std::size_t i = 0; i < metadata.items->items.size(); i += 2) {
    const Value& prefix_key = metadata.items->items[i];
    if (prefix_key.tag != Tag::kStr)
      fail<TypeError>("checkpoint.load.bad_metadata",
                      "_metadata key " + key_text(prefix_key) + " is not a str");
    const std::string& prefix = prefix_key.str();
    const Value& entry = metadata.items->items[i + 1];
    if (entry.tag != Tag::kDict) {
      fail<TypeError>("checkpoint.load.bad_metadata",
                      "_metadata['" + prefix + "'] is a " + tag_name(entry.tag) + ", not a dict");
    }
    charge_map_entry(budget, prefix, sizeof(Metadata));
    sd.metadata().insert_or_assign(prefix, module_metadata(budget, prefix, entry));
  }
}

}  // namespace

StateDict state_dict_of(const Value& result, PickleBudget& budget) {
  if (result.tag != Tag::kDict) {
    fail<TypeError>("checkpoint.load.not_a_state_dict",
                    "data.pkl holds a " + std::string(tag_name(result.tag)) +
                        ", not a state dict (an OrderedDict of tensors)");
  }
  StateDict sd;
  const auto& items = result.items->items;
  for (std::size_t i = 0; i < items.size(); i += 2) {
    if (items[i].tag != Tag::kStr) {
      fail<TypeError>("checkpoint.load.not_a_state_dict",
                      "state dict key is a " + std::string(tag_name(items[i].tag)) + ", not a str");
    }
    const std::string& key = items[i].str();
    if (items[i + 1].tag != Tag::kTensor) {
      fail<TypeError>(
          "checkpoint.load.not_a_state_dict",
          "state dict entry '" + key + "' is a " + tag_name(items[i + 1].tag) + ", not a tensor");
    }
    charge_map_entry(budget, key, sizeof(at::Tensor));
  }
  sd.reserve(items.size() / 2);
  for (std::size_t i = 0; i < items.size(); i += 2) {
    sd.insert_or_assign(items[i].str(), items[i + 1].tensor());
  }
  if (const Value& metadata = result.items->metadata; metadata.tag == Tag::kDict) {
    read_metadata(budget, metadata, sd);
  }
  return sd;
}

}  // namespace pickle
}  // namespace detail
MODHOOKS_END_NAMESPACE
