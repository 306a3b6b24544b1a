#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes fuzz_fleet_wire's seeds for the layouts producers send today
(docs/fleet.md, "Producers and versions"), with python3-msgpack:

  seed-array-batch-map-events  vLLM v0.26 on: [ts, events, rank], map events,
                               bytes and int hashes, lora_name, group_idx
  seed-map-int-hashes          map batch + map events, int hashes (vLLM's
                               default VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)
  seed-forward-compat          a 4th batch element, an unknown field, an
                               unknown kind reusing known names with other
                               types, an undecodable BlockStored

The older seeds (seed-map, seed-array-like, seed-mooncake, seed-empty-array)
were written by hand. Usage: fleet_wire_seeds.py DIR
"""
import hashlib
import os
import sys

import msgpack


def digest(i):
    return hashlib.sha256(b"block %d" % i).digest()


def stored(hashes, **extra):
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
          "token_ids": list(range(16 * len(hashes))), "block_size": 16, "lora_id": None,
          "medium": "GPU", "lora_name": None}
    ev.update(extra)
    return ev


SEEDS = {
    "seed-array-batch-map-events": [
        1.5,
        [stored([digest(0), int.from_bytes(digest(1), "big") & (2**64 - 1)],
                lora_name="sql-lora", group_idx=0),
         {"type": "BlockRemoved", "block_hashes": [digest(0)], "medium": "CPU",
          "group_idx": 1},
         {"type": "AllBlocksCleared"}],
        3,
    ],
    "seed-map-int-hashes": {
        "ts": 2.0,
        "events": [stored([7, 2**64 - 1, 5], medium=None),
                   {"type": "BlockRemoved", "block_hashes": [5], "medium": None}],
        "data_parallel_rank": 0,
    },
    "seed-forward-compat": [
        3.0,
        [stored([1], priority={"x": 1}),
         {"type": "BlockStored", "block_hashes": "not-a-list"},
         {"type": "BlockPinned", "block_hashes": "another type", "medium": 5},
         {"type": "BlockRemoved", "block_hashes": [1, 2]}],
        0,
        {"trace_id": 99},
    ],
}

if __name__ == "__main__":
    for name, batch in SEEDS.items():
        with open(os.path.join(sys.argv[1], name), "wb") as f:
            f.write(msgpack.packb(batch, use_bin_type=True))
