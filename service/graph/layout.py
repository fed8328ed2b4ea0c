"""A batch's task layout when the job leaves it to dstreams: how many tasks read and shuffle it.

Each Spark task costs about 15 ms however little it does (scheduling, the Python worker's round
trip; docs/design-notes.md), and a task cannot use more than one core. So a small batch runs
fastest in one task per stage, and a large one in one task per core: more tasks than cores only
add their fixed cost, fewer leave cores idle. The layout is chosen when the batch is planned,
from its size and the cores Spark offers, and journaled with the plan, so a replay (on this
machine or on one with other cores) runs the batch in exactly the tasks that first ran it: a
map-only output's partitions are its read tasks, a shuffle's output partitions its reducers.

It applies only where the job set nothing: a source's `max_partitions` fixes its read tasks, an
operator's `num_partitions` or the `default_partitions` setting its shuffle partitions, and
stateful operators keep `default_partitions` (their state is partitioned by it, so it cannot
follow one batch's size).

    >>> choose_layout(records=2_000, cores=2)
    TaskLayout(tasks=1)
    >>> choose_layout(records=100_000, cores=2), choose_layout(records=0, cores=8)
    (TaskLayout(tasks=2), TaskLayout(tasks=1))
    >>> TaskLayout.from_json(TaskLayout(3).to_json())
    TaskLayout(tasks=3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Partitions of what the job left unsized but cannot follow one batch's size: stateful operators
# (their state is partitioned by it) and the topics dstreams creates.
FIXED_DEFAULT_PARTITIONS = 4
# Records below which another task costs more than it saves. A second task costs ~15 ms, and
# for a keyed combine a shuffle stage too (~20 ms; one task over one partition needs none), while
# a word-count task reads and counts ~6,000 lines in 15 ms. At 12,500-line batches (50,000
# lines/s, 250 ms) one task ran the job in 50 ms where two took 92 ms (bench/latency_bench.py).
RECORDS_PER_TASK = 20_000
# The journal's key for it, beside the sources' own keys (which are prefixed by their names).
JOURNAL_KEY = "layout"


@dataclass(frozen=True)
class TaskLayout:
    """`tasks`: the read tasks of each source the job left unbounded, and the output
    partitions of each shuffle it left unsized."""

    tasks: int

    def to_json(self) -> dict[str, Any]:
        return {"tasks": self.tasks}

    @classmethod
    def from_json(cls, data: Any) -> TaskLayout | None:
        """The journaled layout; None for a plan journaled before layouts were (its replay
        uses what that version used: one read task per offset range, `default_partitions`)."""
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), int):
            return None
        return cls(max(1, data["tasks"]))


def choose_layout(records: int, cores: int) -> TaskLayout:
    """One task per RECORDS_PER_TASK records, at least one and at most one per core."""
    wanted = -(-records // RECORDS_PER_TASK)
    return TaskLayout(max(1, min(cores, wanted)))


def describe_layout(auto: bool, default_partitions: int, cores: int) -> str:
    """The layout rule a driver runs with, for its start-up log.

    >>> print(describe_layout(True, 4, 2))  # doctest: +NORMALIZE_WHITESPACE
    each batch in 1 task per 20,000 records, at most 2 (the cores Spark offers), for reads and
    stateless shuffles the job left unsized; stateful operators 4 partitions
    >>> print(describe_layout(False, 8, 2))  # doctest: +NORMALIZE_WHITESPACE
    default_partitions 8 for every shuffle the job left unsized; one read task per offset
    range unless a source sets max_partitions
    """
    if not auto:
        return (
            f"default_partitions {default_partitions} for every shuffle the job left unsized; "
            "one read task per offset range unless a source sets max_partitions"
        )
    return (
        f"each batch in 1 task per {RECORDS_PER_TASK:,} records, at most {cores} (the cores "
        "Spark offers), for reads and stateless shuffles the job left unsized; stateful "
        f"operators {default_partitions} partitions"
    )
