"""Word count written to three sinks at once: Kafka, PostgreSQL and files (the chaos tier's job).

One reduced stream of `(word, count)` per batch goes to the outputs `counts_kafka`, `counts_pg` and
`counts_files`; configure them (and the `lines` source) in the job's config. The three outputs run
as three Spark jobs per batch, in the order they are declared, and share the reduce's shuffle.

The order matters only to fault-injection tests: an executor-side crash point fires in the first
output's Spark job. `build` declares Kafka first; `build_pg_first` and `build_files_first` put the
other sinks first. Each order is a different graph, so an app must keep the one it started with.
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, count_words

KAFKA = "counts_kafka"
POSTGRES = "counts_pg"
FILES = "counts_files"


def build(ctx: StreamingContext) -> None:
    _build(ctx, (KAFKA, POSTGRES, FILES))


def build_pg_first(ctx: StreamingContext) -> None:
    _build(ctx, (POSTGRES, FILES, KAFKA))


def build_files_first(ctx: StreamingContext) -> None:
    _build(ctx, (FILES, KAFKA, POSTGRES))


def _build(ctx: StreamingContext, outputs: tuple[str, ...]) -> None:
    # As in examples.wordcount: counting inside each partition fuses the map side into one pass.
    counts = ctx.source("lines").map_partitions(count_words).reduce_by_key(add)
    for name in outputs:
        counts.write(name)
