#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A prefix-cache-aware router over the fleet directory (kva_fleet_score).

For each incoming prompt (token ids), it computes the block hashes vLLM
computes (kvadmit.vllm_block_hashes: its default sha256 algorithm,
PYTHONHASHSEED=0 on the engines), asks the fleet which publisher (pod,
data-parallel rank) holds how long a prefix on which medium, and sends the
prompt to the candidate with the most cached tokens, a GPU copy counting
full and an offloaded one (CPU, disk) half; ties go to the least loaded.

  fleet_router.py --demo
      starts three publishers in this process (vLLM v0.26's format: array
      batch, map events, int hashes, "kv@pod@model" topics), lets each
      engine "cache" the prompts routed to it, and routes 200 prompts drawn
      from 8 shared system prompts; prints the routes and the hit rate.
  fleet_router.py PUB_ENDPOINT... < prompts
      real publishers (their PUB sockets); one prompt a line, token ids
      separated by spaces; prints "pod dp_rank cached_tokens" per line.

Needs libkvadmit and libkvadmit-fleet (python/README.md), python3-zmq and
python3-msgpack for --demo.
"""
import random
import sys
import time

import kvadmit

BLOCK = 16
WEIGHT = {"GPU": 1.0}  # other media: 0.5


def pick(fleet, tokens, candidates, load):
    """The candidate (publisher id) to send tokens to, and its cached tokens."""
    best = {}
    for m in fleet.score(kvadmit.vllm_block_hashes(tokens, BLOCK)):
        value = m.tokens * WEIGHT.get(m.medium, 0.5)
        best[m.publisher] = max(best.get(m.publisher, 0.0), value)
    pub = max(candidates, key=lambda p: (best.get(p, 0.0), -load[p]))
    return pub, best.get(pub, 0.0)


def demo():
    import msgpack
    import zmq

    ctx = zmq.Context()
    pods = []
    for i in range(3):
        s = ctx.socket(zmq.PUB)
        s.setsockopt(zmq.LINGER, 0)
        port = s.bind_to_random_port("tcp://127.0.0.1")
        pods.append({"sock": s, "ep": f"tcp://127.0.0.1:{port}", "seq": 0,
                     "topic": f"kv@pod-{i}@llama-8b".encode()})

    def publish(pod, events):
        batch = msgpack.packb([time.time(), events, 0], use_bin_type=True)
        pod["sock"].send_multipart((pod["topic"], pod["seq"].to_bytes(8, "big"), batch))
        pod["seq"] += 1

    rng = random.Random(29)
    systems = [[rng.randrange(32000) for _ in range(BLOCK * rng.randrange(4, 40))]
               for _ in range(8)]
    load = [0, 0, 0]
    hits = total = 0
    with kvadmit.Fleet([p["ep"] for p in pods], block_size=BLOCK) as fleet:
        deadline = time.monotonic() + 60
        for i, pod in enumerate(pods):  # ZeroMQ's slow joiner
            while fleet.publisher_seq(i) == 0:
                if time.monotonic() > deadline:
                    sys.exit("fleet_router: publishers never connected")
                publish(pod, [])
                time.sleep(0.01)
        for n in range(200):
            prompt = systems[rng.randrange(8)] + [rng.randrange(32000) for _ in range(40)]
            pub, cached = pick(fleet, prompt, range(3), load)
            load[pub] += 1
            hits += int(cached)
            total += len(prompt)
            # the engine caches the prompt's full blocks and says so
            hashes = kvadmit.vllm_block_hashes(prompt, BLOCK)
            publish(pods[pub], [{"type": "BlockStored", "block_hashes": hashes,
                                 "parent_block_hash": None, "token_ids": prompt[:len(hashes) * BLOCK],
                                 "block_size": BLOCK, "lora_id": None, "medium": None,
                                 "lora_name": None}])
            while fleet.publisher_seq(pub) != pods[pub]["seq"]:
                time.sleep(0.001)
            if n < 5:
                print(f"prompt {n}: {len(prompt)} tokens -> pod-{pub} ({int(cached)} cached)")
    print(f"fleet_router: 200 prompts, load per pod {load}, "
          f"{hits / total:.1%} of prompt tokens found cached")
    for p in pods:
        p["sock"].close()
    ctx.term()


def main(endpoints):
    with kvadmit.Fleet(endpoints, block_size=BLOCK) as fleet:
        load = [0] * len(endpoints)
        for line in sys.stdin:
            tokens = [int(t) for t in line.split()]
            pub, cached = pick(fleet, tokens, range(len(endpoints)), load)
            load[pub] += 1
            ident = {m.publisher: m for m in fleet.score(kvadmit.vllm_block_hashes(tokens, BLOCK))}
            m = ident.get(pub)
            print(m.pod if m else endpoints[pub], m.dp_rank if m else -1, int(cached))


if __name__ == "__main__":
    if sys.argv[1:] == ["--demo"]:
        demo()
    elif sys.argv[1:]:
        main(sys.argv[1:])
    else:
        sys.exit(__doc__)
