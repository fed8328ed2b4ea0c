"""Word counts over the last 30 s, every 10 s, to files: `reduce_by_key_and_window` with an
inverse, so each window is the previous one plus the 10 s that entered minus the 10 s that left.

Configure the `lines` source and a `window_counts` sink of type files.
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, count_words
from service.graph.state_functions import count_is_not_zero, subtract


def build(ctx: StreamingContext) -> None:
    per_batch = ctx.source("lines").map_partitions(count_words)
    windows = per_batch.reduce_by_key_and_window(
        add, subtract, length_ms=30_000, slide_ms=10_000, filter_fn=count_is_not_zero
    )
    windows.write("window_counts")
