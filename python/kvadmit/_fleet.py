# SPDX-License-Identifier: Apache-2.0
"""The fleet directory's router query (fleet/include/kvadmit/fleet.h) over
libkvadmit-fleet, cffi ABI mode: a Fleet subscribed to KV-event publishers,
scored from any thread (kva_fleet_score is lock-free).

    import kvadmit
    with kvadmit.Fleet([("tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558")]) as fleet:
        chain = kvadmit.vllm_block_hashes(token_ids, block_size=16)
        for m in fleet.score(chain):
            print(m.pod, m.dp_rank, m.medium, m.blocks)

Where libkvadmit-fleet comes from, first match wins: $KVADMIT_FLEET_LIBRARY;
ctypes.util.find_library("kvadmit-fleet"); beside the libkvadmit this package
loaded (the same directory, or its fleet/ subdirectory in a build tree).
"""
import collections
import ctypes.util
import hashlib
import os
import pickle

from cffi import FFI

from ._lib import ABI_MAJOR, ABI_MINOR, library_path

FLEET_CDEF = r"""
typedef struct kva_fleet kva_fleet;
typedef struct kva_fleet_publisher {
    const char *endpoint;
    const char *replay_endpoint;
    const char *topic;
    uint8_t self;
    const char *curve_server_key;
} kva_fleet_publisher;
typedef struct kva_fleet_block_size {
    const char *medium;
    uint32_t group_idx;
    uint32_t block_size;
} kva_fleet_block_size;
typedef struct kva_fleet_config {
    const kva_fleet_publisher *publishers;
    uint32_t npublishers;
    uint32_t block_size;
    uint64_t max_blocks;
    uint32_t max_chains;
    uint32_t max_chain_blocks;
    uint32_t max_message_bytes;
    uint32_t max_pending;
    uint64_t replay_timeout_ns;
    uint64_t drop_after_ns;
    uint64_t watch_ns;
    uint32_t full_groups, state_groups;
    const char *local_media;
    uint32_t max_media_per_publisher, max_manifest_per_publisher;
    uint64_t quarantine_ns;
    const char *curve_public_key, *curve_secret_key;
    void *zmq_context;
    void *log;
    void *log_ctx;
    uint8_t score;
    const kva_fleet_block_size *block_sizes;
    uint32_t nblock_sizes;
} kva_fleet_config;
typedef struct kva_fleet_match {
    uint32_t publisher;
    uint32_t blocks;
    uint32_t tokens;
    int32_t dp_rank;
    char medium[32];
    char topic[96];
    char pod[64], model[64];
} kva_fleet_match;
void kva_fleet_config_default(kva_fleet_config *cfg);
kva_fleet *kva_fleet_create(const kva_fleet_config *cfg, int *err);
void kva_fleet_destroy(kva_fleet *f);
int kva_fleet_score(const kva_fleet *f, const uint64_t *hashes, uint32_t n,
                    kva_fleet_match *out, uint32_t cap);
int kva_fleet_publisher_seq(const kva_fleet *f, uint32_t id, int64_t *next_seq);
uint64_t kva_fleet_hash_bytes(const void *p, size_t n);
"""

fleet_ffi = FFI()
fleet_ffi.cdef(FLEET_CDEF)

FLEET_SONAME = f"libkvadmit-fleet.so.{ABI_MAJOR}.{ABI_MINOR}"
_lib = None


def _fleet_lib():
    global _lib
    if _lib is not None:
        return _lib
    cands = []
    env = os.environ.get("KVADMIT_FLEET_LIBRARY")
    if env:
        cands.append(env)
    else:
        found = ctypes.util.find_library("kvadmit-fleet")
        if found:
            cands.append(found)
        here = os.path.dirname(os.path.abspath(library_path))
        cands += [os.path.join(here, FLEET_SONAME), os.path.join(here, "fleet", FLEET_SONAME)]
    errors = []
    for c in cands:
        try:
            _lib = fleet_ffi.dlopen(c)
            return _lib
        except OSError as exc:
            errors.append(f"{c}: {exc}")
    raise ImportError("kvadmit: cannot load libkvadmit-fleet (set KVADMIT_FLEET_LIBRARY): "
                      + ("; ".join(errors) or "no candidate found"))


FleetMatch = collections.namedtuple(
    "FleetMatch", "publisher blocks tokens dp_rank medium topic pod model")
FleetMatch.__doc__ = """One (publisher, medium) holding a prefix of a chain: blocks (and
tokens) of it, the publisher's id, data-parallel rank, topic and the pod and model of a
"kv@pod@model" topic ("" otherwise)."""


def hash_bytes(digest):
    """A bytes block hash as the fleet keys it: the last 8 bytes, big-endian, which is
    vLLM's maybe_convert_block_hash (the int its publishers send by default)."""
    return int(_fleet_lib().kva_fleet_hash_bytes(digest, len(digest)))


def vllm_block_hashes(token_ids, block_size, seed="0", extra_keys=None):
    """The block hashes vLLM computes for token_ids with its default "sha256" algorithm
    (sha256 of the pickled (parent, block's tokens, extra_keys), NONE_HASH =
    sha256(PYTHONHASHSEED)), as the ints the fleet keys: full blocks only. extra_keys:
    None, or a tuple (e.g. (lora_name,)) used for every block."""
    def sha(obj):
        return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    parent = sha(seed)
    out = []
    for i in range(len(token_ids) // block_size):
        parent = sha((parent, tuple(token_ids[i * block_size:(i + 1) * block_size]),
                      extra_keys))
        out.append(int.from_bytes(parent[-8:], "big"))
    return out


def _err(rc, what):
    from ._errors import error
    return error(rc, what)


class Fleet:
    """A fleet directory for routers: created with cfg.score set, closed by close() or
    the with block. publishers: a list of endpoints, or (endpoint, replay_endpoint) /
    (endpoint, replay_endpoint, topic) tuples; ids are their positions. score() may be
    called from any thread, concurrently."""

    def __init__(self, publishers, block_size=0, max_blocks=None, full_groups=1):
        lib = _fleet_lib()
        self._keep = []
        pubs = fleet_ffi.new("kva_fleet_publisher[]", len(publishers))
        for i, p in enumerate(publishers):
            p = (p,) if isinstance(p, str) else tuple(p)
            for k, field in enumerate(("endpoint", "replay_endpoint", "topic")):
                if k < len(p) and p[k] is not None:
                    s = fleet_ffi.new("char[]", p[k].encode())
                    self._keep.append(s)
                    setattr(pubs[i], field, s)
        cfg = fleet_ffi.new("kva_fleet_config *")
        lib.kva_fleet_config_default(cfg)
        cfg.publishers = pubs
        cfg.npublishers = len(publishers)
        cfg.block_size = block_size
        if max_blocks is not None:
            cfg.max_blocks = max_blocks
        cfg.full_groups = full_groups
        cfg.score = 1
        err = fleet_ffi.new("int *")
        f = lib.kva_fleet_create(cfg, err)
        if f == fleet_ffi.NULL:
            raise _err(err[0], "kva_fleet_create")
        self._f = f
        self._n = len(publishers)

    def score(self, hashes, cap=64):
        """Every (publisher, medium) holding a prefix of the chain, longest first."""
        chain = fleet_ffi.new("uint64_t[]", [h & ((1 << 64) - 1) for h in hashes])
        out = fleet_ffi.new("kva_fleet_match[]", cap)
        n = _fleet_lib().kva_fleet_score(self._f, chain, len(hashes), out, cap)
        if n < 0:
            raise _err(n, "kva_fleet_score")
        s = fleet_ffi.string
        return [FleetMatch(o.publisher, o.blocks, o.tokens, o.dp_rank, s(o.medium).decode(),
                           s(o.topic).decode(errors="replace"), s(o.pod).decode(errors="replace"),
                           s(o.model).decode(errors="replace"))
                for o in (out[i] for i in range(n))]

    def publisher_seq(self, pub):
        """The sequence number expected next from publisher pub (every earlier batch applied)."""
        v = fleet_ffi.new("int64_t *")
        rc = _fleet_lib().kva_fleet_publisher_seq(self._f, pub, v)
        if rc:
            raise _err(rc, "kva_fleet_publisher_seq")
        return int(v[0])

    def close(self):
        if self._f is not None:
            _fleet_lib().kva_fleet_destroy(self._f)
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
