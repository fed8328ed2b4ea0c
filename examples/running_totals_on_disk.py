"""Running word totals over a vocabulary larger than memory, with `update_state_on_disk`.

The totals live in one SQLite store per partition on the executors' disks; a batch reads and
writes only the words it saw, and its checkpoint cost follows the words it changed, not the
vocabulary (docs/architecture.md, "State on disk"). Each batch writes the words whose total it
changed; the totals are queryable live as `totals` (`GET /state/totals/<word>`). Configure the
`lines` source and a `totals` sink (e.g. files, or postgres with `columns: [word, n]` and
`key_columns: [word]`).
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, count_words


def add_to_total(counts: list[int], total: int | None) -> int:
    return (total or 0) + sum(counts)


def build(ctx: StreamingContext) -> None:
    per_batch = ctx.source("lines").map_partitions(count_words).reduce_by_key(add)
    totals = per_batch.update_state_on_disk(add_to_total).queryable("totals")
    totals.write("totals")
