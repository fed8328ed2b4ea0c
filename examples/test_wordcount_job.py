"""Testing a job with the dstreams pytest plugin: the word count, fed from lists, no broker.

`job_runner` (a fixture of the plugin, installed with dstreams) runs the job's `build(ctx)` on
one list of values per batch for each source it reads, on one local Spark for the whole session,
and returns what each output wrote, batch by batch. Run it with `pytest examples/`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WordCounts = list[list[tuple[str, int]]]


def test_each_batch_counts_its_own_words(job_runner: Callable[..., Any]) -> None:
    lines = [["the cat", "The hat"], [], ["hat"]]  # three batches; the second is empty

    run = job_runner("examples.wordcount:build", {"lines": lines})

    expected: WordCounts = [[("cat", 1), ("hat", 1), ("the", 2)], [], [("hat", 1)]]
    assert run.output("counts") == expected
    assert run.batch_times == [1_000_000, 1_001_000, 1_002_000]


def test_running_totals_carry_state_across_batches(job_runner: Callable[..., Any]) -> None:
    lines = [["a b", "a"], ["b"], [], ["a"]]

    run = job_runner("examples.running_totals:build", {"lines": lines})

    # Only the words whose total changed are written, each with its total so far.
    expected: WordCounts = [[("a", 2), ("b", 1)], [("b", 2)], [], [("a", 3)]]
    assert run.output("totals") == expected
