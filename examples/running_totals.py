"""Running word totals with `update_state_by_key`, upserted into PostgreSQL on the word.

Each batch writes only the words whose total changed (`.changes()`), so the table holds one row
per word with its latest total. Configure the `lines` source and a `totals` sink of type postgres
with `columns: [word, n]` and `key_columns: [word]` (upsert on the word).
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, count_words


def add_to_total(counts: list[int], total: int | None) -> int:
    return (total or 0) + sum(counts)


def build(ctx: StreamingContext) -> None:
    per_batch = ctx.source("lines").map_partitions(count_words).reduce_by_key(add)
    per_batch.update_state_by_key(add_to_total).changes().write("totals")
