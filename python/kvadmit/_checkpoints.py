# SPDX-License-Identifier: Apache-2.0
"""Checkpoints into C: the manifest that answers a lookup (kva_manifest) and
the host's own local checkpoint (kva_checkpoint, rule host-local-checkpoints). Each raises what
cffi raises for a field the C type cannot hold; the engine's call guard
maps that to the KvadmitError the library would answer."""
from ._errors import error
from ._lib import ffi
from ._types import Checkpoint, Location

# A miss: the answer for a lookup whose callback raised.
EMPTY_MANIFEST = ffi.new("kva_manifest *")


def manifest_of(checkpoints):
    """A kva_manifest of up to KVA_MAX_CHECKPOINTS Checkpoints (or tuples)."""
    m = ffi.new("kva_manifest *")
    n = 0
    for cp in checkpoints:
        if n >= len(m.entries):
            raise error(-22, "kva_lookup_answer: more than KVA_MAX_CHECKPOINTS")
        fill_checkpoint(m.entries[n], cp)
        n += 1
    m.count = n
    return m


def local_checkpoint_of(cp):
    """A kva_checkpoint of the host's local checkpoint `cp`."""
    c = ffi.new("kva_checkpoint *")
    fill_local(c, cp)
    return c


def fill_checkpoint(c, cp):
    """Writes the Checkpoint (or tuple) cp into the kva_checkpoint c."""
    if not isinstance(cp, Checkpoint):
        cp = Checkpoint(*cp)
    c.position = cp.position
    c.location = int(cp.location)
    c.compatible = 1 if cp.compatible else 0
    c.tier = int(cp.tier)
    c.id = cp.id
    c.epoch = cp.epoch


def fill_local(c, cp):
    """Writes cp into c as a LOCAL, compatible checkpoint; OutOfRange for a
    position beyond any prompt."""
    if not isinstance(cp, Checkpoint):
        cp = Checkpoint(*cp)
    pos = cp.position
    if isinstance(pos, int) and pos > 0xFFFFFFFF:
        # beyond any prompt (uint32): the library's -ERANGE for position > prompt_tokens
        raise error(-34, f"position {pos} is beyond any prompt")
    c.position = pos
    c.location = int(Location.LOCAL)
    c.compatible = 1
    c.id = cp.id
    c.epoch = cp.epoch
