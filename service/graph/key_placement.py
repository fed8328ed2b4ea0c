"""What decides the partition a key lands in, so that a change of it is noticed, never silent.

pyspark places a key in partition ``portable_hash(key) % n``. For strings and bytes that calls
Python's ``hash``, whose value depends on the interpreter's hash algorithm (``sys.hash_info``:
a new Python may bring another one, as 3.4 and 3.11 did) and on ``PYTHONHASHSEED``, which
dstreams fixes for every Python worker (`HASH_SEED`). A keyed state checkpointed, or a batch's
shuffle planned, under one placement must be read or replayed under the same one, so the
placement is part of the graph's fingerprint and of every keyed checkpoint manifest
(docs/architecture.md, "Faults").

>>> key_placement("0").endswith("PYTHONHASHSEED=0")
True
>>> key_placement("0") == key_placement("1")
False
"""

from __future__ import annotations

import sys

HASH_SEED = "0"
"""The `PYTHONHASHSEED` of every Python worker (and of the driver's environment for them)."""
PARTITIONER = "pyspark.rdd.portable_hash"


def key_placement(seed: str = HASH_SEED) -> str:
    """The partitioner, this interpreter's string hash algorithm and width, and the seed."""
    info = sys.hash_info
    return f"{PARTITIONER}; {info.algorithm}-{info.hash_bits}; PYTHONHASHSEED={seed}"


def driver_hashes_like_workers() -> bool:
    """Whether this interpreter hashes strings as the Python workers do, so it may place a key
    in its partition itself (a live state query, `service.graph.queryable`).

    Only the seed the interpreter started with counts: setting `PYTHONHASHSEED` later (as
    `service.driver.spark` does, for the workers it starts) changes nothing for it. Seed 0 is
    the one seed that turns hash randomization off, so `sys.flags.hash_randomization` is 0
    exactly when this interpreter started with `HASH_SEED`. The workers run this interpreter
    (`PYSPARK_PYTHON`), hence its hash algorithm too.
    """
    return HASH_SEED == "0" and sys.flags.hash_randomization == 0
