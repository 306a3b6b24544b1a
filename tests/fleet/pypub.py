#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A KV-event publisher written independently of the C decoder, for test_fleet.

It follows vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py, commit
0181ea3173e53eea8cf04a86891488e3dc89bb34): PUB frames (topic, 8-byte
big-endian sequence, msgpack EventBatch) and a ROUTER replay socket that
resends buffered batches from a requested sequence and ends with sequence -1
and an empty payload. The payload is encoded field by field the way msgspec
encodes those structs (no array_like): the batch a map {ts, events,
data_parallel_rank}, each event a map whose first key "type" is the tag,
block hashes as 32-byte bytes (ExternalBlockHash = bytes | int).

Options (argv):
  --reply-frames 3|4  replay replies as ["", seq, payload] and end marker
                      ["", -1, ""] (3, the default: vLLM before v0.26 and
                      SGLang), or with the topic after the delimiter,
                      ["", topic, seq, payload] and ["", "", -1, ""] (4: vLLM
                      v0.26 on, vllm PR #45177)
  --array-batch       the batch as an array [ts, events, rank] with map events
                      (vLLM v0.26 on, vllm PR #42892)
  --int-hashes        hashes as vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
                      sends them: the digest's last 8 bytes, big-endian
  --topic T           the topic frame (default empty, vLLM's default)

Commands, one a line on stdin:
  store H1,H2,... BLOCK_SIZE MEDIUM|- GROUP|-   (H: the digest's last 8 bytes, decimal)
  remove H1,H2,... MEDIUM|- GROUP|-
  clear | empty | skip-next | quit
Prints "READY <pub endpoint> <replay endpoint>" first, "OK" after each command.
"""
import hashlib
import select
import sys
import time

import msgpack
import zmq


def digest(h):
    # 32 bytes like vLLM's sha256 block hashes; the last 8 carry the test's
    # number (what vLLM's int form keeps, maybe_convert_block_hash)
    return hashlib.sha256(str(h).encode()).digest()[:24] + int(h).to_bytes(8, "big")


def option(name, default=None):
    if name in sys.argv:
        i = sys.argv.index(name)
        return sys.argv[i + 1] if default is not None else True
    return default


def main():
    reply_frames = int(option("--reply-frames", "3"))
    array_batch = option("--array-batch")
    int_hashes = option("--int-hashes")
    topic = option("--topic", "").encode()

    def block_hash(h):
        d = digest(h)
        return int.from_bytes(d, "big") & ((1 << 64) - 1) if int_hashes else d

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    router = ctx.socket(zmq.ROUTER)
    pub.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.LINGER, 0)
    pport = pub.bind_to_random_port("tcp://127.0.0.1")
    rport = router.bind_to_random_port("tcp://127.0.0.1")
    print("READY tcp://127.0.0.1:%d tcp://127.0.0.1:%d" % (pport, rport), flush=True)
    seq = 0
    buf = []  # (seq, payload)
    skip = False
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    while True:
        ready = dict(poller.poll(100))
        if router in ready:
            frames = router.recv_multipart()
            if len(frames) == 3:
                client, _, start = frames
                start = int.from_bytes(start, "big")
                head = (client, b"", topic) if reply_frames == 4 else (client, b"")
                end = (client, b"", b"") if reply_frames == 4 else (client, b"")
                for s, payload in buf:
                    if s >= start:
                        router.send_multipart(head + (s.to_bytes(8, "big"), payload))
                router.send_multipart(end + ((-1).to_bytes(8, "big", signed=True), b""))
        if sys.stdin.fileno() not in ready:
            continue
        line = sys.stdin.readline()
        if not line or line.strip() == "quit":
            return
        w = line.split()
        events = []
        if w[0] == "store":
            hashes = [block_hash(h) for h in w[1].split(",")]
            bs = int(w[2])
            ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
                  "token_ids": list(range(bs * len(hashes))), "block_size": bs,
                  "lora_id": None, "medium": None if w[3] == "-" else w[3], "lora_name": None}
            if w[4] != "-":
                ev["group_idx"] = int(w[4])
            events.append(ev)
        elif w[0] == "remove":
            ev = {"type": "BlockRemoved", "block_hashes": [block_hash(h) for h in w[1].split(",")],
                  "medium": None if w[2] == "-" else w[2]}
            if w[3] != "-":
                ev["group_idx"] = int(w[3])
            events.append(ev)
        elif w[0] == "clear":
            events.append({"type": "AllBlocksCleared"})
        elif w[0] == "skip-next":
            skip = True
            print("OK", flush=True)
            continue
        if array_batch:
            batch = [time.time(), events, 0]
        else:
            batch = {"ts": time.time(), "events": events, "data_parallel_rank": 0}
        payload = msgpack.packb(batch, use_bin_type=True)
        buf.append((seq, payload))
        if not skip:
            pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
        skip = False
        seq += 1
        print("OK", flush=True)


if __name__ == "__main__":
    main()
