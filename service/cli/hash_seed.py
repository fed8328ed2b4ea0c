"""`dstreams run` hashes strings as its Python workers do.

pyspark places a key in partition `portable_hash(key) % n`, and a string's hash depends on the
`PYTHONHASHSEED` its interpreter started with. dstreams fixes the workers' seed
(`service.graph.key_placement.HASH_SEED`), but the driver's own interpreter has whatever seed it
was started with, and setting the variable later does not change it. A live state query places
its key in the driver (`service.graph.query_jobs.key_partition`), so `dstreams run` started
without the seed starts itself again, in the same process (same PID, same arguments), with it.
The image and the test helpers set the seed already, so they never pay for this.
"""

from __future__ import annotations

import os
import sys

from service.graph.key_placement import HASH_SEED, driver_hashes_like_workers

RESTARTED = "DSTREAMS_RESTARTED_FOR_HASH_SEED"
"""Set in the environment of the interpreter started again: it never starts itself a third time
(an interpreter run with -E ignores the variable, for one)."""


def restart_needed(environ: dict[str, str] | None = None) -> bool:
    """Whether this interpreter should start again with the workers' seed.

    >>> restart_needed({RESTARTED: "1"})
    False
    """
    env = os.environ if environ is None else environ
    return not driver_hashes_like_workers() and RESTARTED not in env


def restart_with_hash_seed() -> None:
    """Replaces this process by the same command under `PYTHONHASHSEED=HASH_SEED`, when it does
    not run under it already; returns only when nothing needs doing."""
    if not restart_needed():
        return
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, RESTARTED: "1"}
    # sys.orig_argv: the interpreter's own options and the script or `-m` as they were given.
    os.execve(sys.executable, sys.orig_argv, env)  # noqa: S606 - the same command, re-run
