# SPDX-License-Identifier: BSD-3-Clause
"""Python's side of tests/model_io_test.cpp.

  write DIR          writes DIR/py.safetensors, DIR/py.pt (Python's torch.save of a state dict) and
                     a sharded safetensors checkpoint DIR/py_sharded/model.safetensors.index.json
                     in Hugging Face's layout, all of the tensors `reference()` gives
  check INDEX REF    follows INDEX as Hugging Face's loaders do (read "weight_map", load each
                     shard it names from the index's folder with safetensors' load_file or
                     torch.load(weights_only=True)) and checks the result against REF (one
                     file) bit for bit, and "metadata"."total_size"

transformers is not installed here: the index is followed by this loader, written after
transformers' load_sharded_checkpoint (json index, weight_map values, one load per shard).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file


def reference():
    """What the C++ test computes too: arange-based values, exact in every dtype used."""
    return {
        "fc1.weight": (torch.arange(64 * 32, dtype=torch.float32) * 0.25).reshape(64, 32),
        "fc1.bias": torch.arange(64, dtype=torch.float32) - 7,
        "fc2.weight": (torch.arange(8 * 64, dtype=torch.float32) * -0.5).reshape(8, 64),
        "fc2.bias": torch.arange(8, dtype=torch.float32) * 3,
    }


def load_any(path):
    if path.endswith(".safetensors"):
        return load_file(path)
    return torch.load(path, weights_only=True)


def follow_index(index_path):
    with open(index_path) as f:
        index = json.load(f)
    folder = os.path.dirname(index_path)
    state = {}
    for shard in sorted(set(index["weight_map"].values())):
        part = load_any(os.path.join(folder, shard))
        for key, tensor in part.items():
            assert index["weight_map"][key] == shard, (key, shard)
            assert key not in state, key
            state[key] = tensor
    assert set(state) == set(index["weight_map"]), "index and shards disagree"
    total = sum(t.numel() * t.element_size() for t in state.values())
    assert index["metadata"]["total_size"] == total, (index["metadata"], total)
    return state, len(set(index["weight_map"].values()))


def main():
    if sys.argv[1] == "write":
        out = sys.argv[2]
        sd = reference()
        save_file(sd, os.path.join(out, "py.safetensors"))
        torch.save(torch.nn.Module.state_dict(_module_of(sd)), os.path.join(out, "py.pt"))
        # Sharded as save_pretrained does: two shards and the index.
        sharded = os.path.join(out, "py_sharded")
        os.makedirs(sharded, exist_ok=True)
        keys = list(sd)
        shards = {"model-00001-of-00002.safetensors": keys[:2],
                  "model-00002-of-00002.safetensors": keys[2:]}
        weight_map = {}
        for name, part in shards.items():
            save_file({k: sd[k] for k in part}, os.path.join(sharded, name))
            weight_map.update({k: name for k in part})
        total = sum(t.numel() * t.element_size() for t in sd.values())
        with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f,
                      indent=2, sort_keys=True)
    elif sys.argv[1] == "check":
        state, shards = follow_index(sys.argv[2])
        ref = load_any(sys.argv[3])
        assert list(sorted(state)) == list(sorted(ref)), (sorted(state), sorted(ref))
        for key, tensor in ref.items():
            assert state[key].dtype == tensor.dtype and torch.equal(state[key], tensor), key
        print(f"{shards} shards, {len(state)} tensors match")
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]}")


def _module_of(sd):
    """An nn module holding `sd` as two Linear layers, so torch.save writes a real state dict."""
    model = torch.nn.Module()
    model.fc1 = torch.nn.Linear(32, 64)
    model.fc2 = torch.nn.Linear(64, 8)
    model.load_state_dict(sd)
    return model


if __name__ == "__main__":
    main()
