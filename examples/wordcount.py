"""Word count: lines from a Kafka topic, words counted per batch, written exactly once.

The functions it uses come from the installed `service.graph.functions`, so Spark's Python
workers can import them; a job's own functions must likewise be importable where executors run.

Configure the `lines` source and the `counts` sink in the job's config (config/wordcount.yaml).
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, count_words


def build(ctx: StreamingContext) -> None:
    # Counting inside each partition first fuses the map side into one pass over the lines.
    ctx.source("lines").map_partitions(count_words).reduce_by_key(add).write("counts")
