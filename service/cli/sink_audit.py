"""The sinks' part of `dstreams audit`: each (output, batch, partition) the journal planned and
completed is committed, exactly once, in the sink of its output.

The journal's `completed` records name each output's number of tasks (`partitions`), hence the
markers its sink must hold for the batch; records of older builds lack it, and the audit then
says which batches it could not check. Per sink:

- files (`sinks.files`): `t=<batch>/_SUCCESS` exists and names how many partitions the batch was
  written with, every part `0 .. n-1` is there, and no other part is (a duplicated or stray part
  would be read as output);
- Kafka and dead letters (`service.cli.kafka_audit`): the marker topic holds one committed marker
  per (batch, partition), and the output topic's committed records are the ones markers name;
- PostgreSQL (`service.cli.postgres_audit`): the marker table holds one row per (batch,
  partition), and the table's rows are the ones markers name.

The console and unconfigured outputs are listed as not checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from service.cli.marker_audit import OutputCheck, Tasks
from service.journal.audit import Violation
from service.journal.base import JournalState

if TYPE_CHECKING:
    from service.config.settings import Settings
    from sinks.base import Sink
    from sinks.files import FileSink


def completed_tasks(state: JournalState) -> dict[str, dict[int, int | None]]:
    """Per output the journal's completed batches name, each batch's number of tasks."""
    tasks: dict[str, dict[int, int | None]] = {}
    for t in sorted(state.completed):
        record = state.completed[t]
        for output in record.outputs:
            tasks.setdefault(output, {})[t] = record.partitions.get(output)
    return tasks


def check_outputs(settings: Settings, state: JournalState) -> list[OutputCheck]:
    """One check per output the journal's completed batches name, in name order."""
    from service.cli.kafka_audit import check_kafka_outputs

    tasks = completed_tasks(state)
    sinks = {output: _sink_of(settings, output) for output in tasks}
    checks = {o: _check_output(settings, o, sinks[o], times) for o, times in tasks.items()}
    checks |= check_kafka_outputs(settings.app_id, sinks, tasks, state)
    return [checks[output] for output in sorted(checks)]


def _sink_of(settings: Settings, output: str) -> Sink | None:
    """The output's sink as the driver builds it, or None when it is not configured (or a
    console). Building a sink opens no client: they open on first use."""
    from service.config.sinks import ConsoleSinkSettings
    from service.driver.wiring import make_sink
    from service.graph.outputs import DEAD_LETTER_SUFFIX

    if output.endswith(DEAD_LETTER_SUFFIX) and settings.dead_letter.topic is not None:
        local = settings.spark.parsed_master.is_local
        return settings.dead_letter.build(settings.kafka, local_master=local)
    configured = settings.sinks.get(output)
    if configured is None or isinstance(configured, ConsoleSinkSettings):
        return None
    return make_sink(settings, output)


def _check_output(settings: Settings, output: str, sink: Sink | None, tasks: Tasks) -> OutputCheck:
    from service.cli.postgres_audit import check_postgres_output
    from sinks.files import FileSink
    from sinks.postgres import PostgresSink

    if isinstance(sink, FileSink):
        violations = check_file_output(sink, output, tasks, tasks)
        return OutputCheck(output, "files", True, len(tasks), tuple(violations))
    if isinstance(sink, PostgresSink):
        sharing = [
            name
            for name, other in settings.sinks.items()
            if name != output and getattr(other, "table", None) == sink.table
        ]
        return check_postgres_output(settings.app_id, output, sink, tasks, sharing)
    configured = settings.sinks.get(output)
    kind = configured.type if configured is not None else _unconfigured(output)
    return OutputCheck(output, kind, False, len(tasks))


def _unconfigured(output: str) -> str:
    from service.graph.outputs import DEAD_LETTER_SUFFIX

    return "dead-letters" if output.endswith(DEAD_LETTER_SUFFIX) else "unconfigured"


# --- files ------------------------------------------------------------------------------------


def check_file_output(
    sink: FileSink, output: str, batch_times: Iterable[int], tasks: Tasks | None = None
) -> list[Violation]:
    """Every violation of `output`'s completed batches in the files sink, oldest batch first;
    with the journal's `tasks`, each `_SUCCESS` must name the batch's number of tasks too."""
    violations: list[Violation] = []
    for t in batch_times:
        violations += _check_batch(sink, output, t, (tasks or {}).get(t))
    return violations


def _check_batch(sink: FileSink, output: str, t: int, tasks: int | None) -> list[Violation]:
    from sinks.files import SUCCESS

    folder = sink.batch_dir(output, t)
    marker = folder / SUCCESS
    if not marker.is_file():
        what = f"output {output} batch {t} is journaled as completed, but {marker} is missing"
        return [Violation("uncommitted", what)]
    try:
        partitions = int(json.loads(marker.read_text())["partitions"])
    except (ValueError, KeyError, TypeError) as error:
        what = f"{marker} does not name the batch's partitions ({error!r})"
        return [Violation("uncommitted", what)]
    if tasks is not None and tasks != partitions:
        what = f"output {output} batch {t}: {marker} names {partitions} parts, the journal {tasks}"
        return [Violation("partitions-mismatch", what)]
    expected = {f"part-{p:05d}.{sink.suffix}" for p in range(partitions)}
    found = {path.name for path in folder.glob("part-*")}
    violations = [
        Violation("missing-part", f"output {output} batch {t}: {name} of {partitions} is missing")
        for name in sorted(expected - found)
    ]
    violations += [
        Violation(
            "extra-part",
            f"output {output} batch {t}: {name} is not one of the {partitions} parts its "
            f"{SUCCESS} names (a duplicated or stray part, read as output)",
        )
        for name in sorted(found - expected)
    ]
    return violations
