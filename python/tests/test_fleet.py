# SPDX-License-Identifier: Apache-2.0
"""kvadmit.Fleet (the fleet directory's router query) against a publisher in
this process (python3-zmq, python3-msgpack; skipped without them), sending as
vLLM v0.26 does: an array batch with map events, int block hashes computed as
vLLM computes them, a "kv@pod@model" topic."""
import time

import pytest

import kvadmit

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

try:
    kvadmit.hash_bytes(b"\x01")
except ImportError:
    pytest.skip("libkvadmit-fleet not built", allow_module_level=True)


def test_hash_bytes_is_vllms_int_form():
    digest = bytes(range(32))
    assert kvadmit.hash_bytes(digest) == int.from_bytes(digest, "big") & (2**64 - 1)
    assert kvadmit.hash_bytes(b"\x01\x02") == 0x0102


def test_vllm_block_hashes_match_the_checked_in_vectors():
    # tests/fleet/vllm_hash_vectors.h: tokens 0..47, blocks of 16, PYTHONHASHSEED=0
    assert kvadmit.vllm_block_hashes(list(range(48)), 16) == [
        0x6EC84AE048FAAAA6, 0xAFE70601EECA92C8, 0xA0A6C35DD9B88E0A]
    assert kvadmit.vllm_block_hashes(list(range(47)), 16)[-1] == 0xAFE70601EECA92C8


def test_router_scores_a_publisher_and_its_identity():
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    topic = b"kv@pod-3@llama-8b"
    seq = [0]

    def send(events):
        payload = msgpack.packb([time.time(), events, 2], use_bin_type=True)
        pub.send_multipart((topic, seq[0].to_bytes(8, "big"), payload))
        seq[0] += 1

    tokens = list(range(100, 100 + 16 * 6))
    chain = kvadmit.vllm_block_hashes(tokens, 16)
    with kvadmit.Fleet([f"tcp://127.0.0.1:{port}"], block_size=16) as fleet:
        deadline = time.monotonic() + 60
        while fleet.publisher_seq(0) == 0:  # ZeroMQ's slow joiner
            assert time.monotonic() < deadline
            send([])
            time.sleep(0.01)
        send([{"type": "BlockStored", "block_hashes": chain[:4], "parent_block_hash": None,
               "token_ids": tokens[:64], "block_size": 16, "lora_id": None, "medium": None,
               "lora_name": None}])
        send([{"type": "BlockStored", "block_hashes": chain[:2], "parent_block_hash": None,
               "token_ids": tokens[:32], "block_size": 16, "lora_id": None, "medium": "CPU",
               "lora_name": None}])
        while fleet.publisher_seq(0) != seq[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        got = fleet.score(chain)
        assert [(m.medium, m.blocks, m.tokens) for m in got] == [("GPU", 4, 64), ("CPU", 2, 32)]
        assert {(m.publisher, m.dp_rank, m.pod, m.model, m.topic) for m in got} == {
            (0, 2, "pod-3", "llama-8b", "kv@pod-3@llama-8b")}
        assert fleet.score([12345] + chain) == []  # its first block held by nobody
        assert len(fleet.score(chain, cap=1)) == 1
    pub.close()
    ctx.term()


def test_example_router_runs():
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    ex = os.path.join(here, "..", "..", "examples", "fleet_router.py")
    r = subprocess.run([sys.executable, ex, "--demo"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fleet_router: 200 prompts" in r.stdout
    cached = float(r.stdout.rsplit("per pod", 1)[1].split("%")[0].split()[-1])
    assert cached > 30  # the shared system prompts are found again
