"""CPU time used by this process and its descendants, grouped by role, read from /proc.

A benchmark on a shared 2-core machine is often limited by who takes the cores rather than by
its own code: this says how much CPU each role (the brokers, the endpoint, the benchmark's own
clients) spent during a phase, so a ratio can be explained, not only printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # exited since it was listed
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    return text.rsplit(")", 1)[1].split()


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(frontier)
    return found


def _cpu_seconds(pid: int) -> float:
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _command_line(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def cpu_by_role(role_of: Callable[[int, str], str]) -> dict[str, float]:
    """CPU seconds so far of this process and every live descendant, summed by
    `role_of(pid, command line)`."""
    totals: dict[str, float] = {}
    for pid in _descendants(os.getpid()):
        role = role_of(pid, _command_line(pid))
        totals[role] = totals.get(role, 0.0) + _cpu_seconds(pid)
    return totals


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per role between two `cpu_by_role` readings."""
    return {role: after[role] - before.get(role, 0.0) for role in after}
