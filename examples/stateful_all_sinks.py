"""Running word totals to PostgreSQL and Kafka, sliding window counts to files (the stateful
chaos test's job).

Each batch's word counts feed two stateful streams:

- `update_state_by_key` keeps every word's running total; the words whose total changed go to
  `totals_kafka` (records keyed by word, value the total) and `totals_pg` (configure
  `key_columns: [word]` so each batch upserts the latest total). The totals are queryable as
  `totals`: `GET /state/totals/<word>` on the driver's HTTP port answers a word's total as of
  the last completed batch (the stateful chaos tests check those answers);
- `reduce_by_key_and_window` with an inverse counts the words of the last 4 s every 2 s and
  writes each window's non-zero counts to `windows_files`.

Configure the `lines` source, the three sinks and `checkpoint` in the job's config.
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, count_words
from service.graph.state_functions import count_is_not_zero, subtract

TOTALS_KAFKA = "totals_kafka"
TOTALS_PG = "totals_pg"
TOTALS_QUERY = "totals"
WINDOWS = "windows_files"
WINDOW_MS = 4_000
SLIDE_MS = 2_000


def add_to_total(counts: list[int], total: int | None) -> int:
    return (total or 0) + sum(counts)


def build(ctx: StreamingContext, state_partitions: int | None = None) -> None:
    """`state_partitions`: the partitions of the running totals and of the windows (default:
    the context's); it may change from one run to the next (the README's "State, windows and
    checkpoints")."""
    counts = ctx.source("lines").map_partitions(count_words).reduce_by_key(add)
    state = counts.update_state_by_key(add_to_total, state_partitions)
    # Answers queries only: not part of the graph's fingerprint, no output changes.
    totals = state.queryable(TOTALS_QUERY).changes()
    totals.write(TOTALS_KAFKA)
    totals.write(TOTALS_PG)
    windows = counts.reduce_by_key_and_window(
        add,
        subtract,
        length_ms=WINDOW_MS,
        slide_ms=SLIDE_MS,
        num_partitions=state_partitions,
        filter_fn=count_is_not_zero,
    )
    windows.write(WINDOWS)
