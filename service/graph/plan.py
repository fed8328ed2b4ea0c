"""The batch plan as a value: what every source reads in one batch, decided before any work runs.

A source returns a `SourcePlan` for batch `t`; the lifecycle gathers them into a `BatchPlan`
keyed by source name, journals it, and hands the same value down to the outputs and every
stream's `compute`. Nothing keeps a copy: a replay passes in the plan rebuilt from the journal,
so it reads exactly what the first attempt read.

    >>> from connectors.offsets import OffsetRange
    >>> plan = BatchPlan(1000, {
    ...     "lines": SourcePlan((OffsetRange("words", 0, 5, 9),)),
    ...     "queue": SourcePlan(extra={"queue:queue": 3}),
    ... })
    >>> [r.count for r in plan.ranges], plan.extra
    ([4], {'queue:queue': 3})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.offsets import OffsetRange
from service.errors import DStreamsError
from service.graph.layout import TaskLayout


class PlanError(DStreamsError):
    """A batch plan does not fit the graph it is used with."""


@dataclass(frozen=True)
class SourcePlan:
    """What one source reads in one batch.

    `ranges` are Kafka offset ranges; `extra` is JSON data for sources that are not Kafka. Its
    keys go into the journal's flat `extra` object beside every other source's, so each source
    keys them by its own name (the queue source writes `queue:<name>`).
    """

    ranges: tuple[OffsetRange, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Copies, so that neither a caller's list nor its dict can change the plan afterwards.
        object.__setattr__(self, "ranges", tuple(self.ranges))
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def offsets(self) -> int:
        """How many offsets the ranges span (0: nothing to read from Kafka)."""
        return sum(r.count for r in self.ranges)


@dataclass(frozen=True)
class BatchPlan:
    """What batch `batch_time` covers: one `SourcePlan` per source, keyed by source name.

    The journal stores the flat views `ranges` and `extra`; a recovering driver splits them
    among the sources again (see `service.driver.recovery.journaled_plan`).
    """

    batch_time: int
    sources: Mapping[str, SourcePlan] = field(default_factory=dict)
    layout: TaskLayout | None = None
    """The tasks dstreams chose for what the job left unsized (`service.graph.layout`); None
    where the job sized everything, or the plan was journaled before layouts were."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", dict(self.sources))
        _check_extra_keys(self.sources)

    def source(self, name: str) -> SourcePlan:
        """The plan of source `name`; a plan made for another graph is refused."""
        plan = self.sources.get(name)
        if plan is None:
            known = ", ".join(sorted(self.sources)) or "none"
            msg = (
                f"batch {self.batch_time} has no plan for source {name!r} (planned sources: "
                f"{known}); a plan must come from the same graph that runs it"
            )
            raise PlanError(msg)
        return plan

    @property
    def ranges(self) -> tuple[OffsetRange, ...]:
        """Every source's offset ranges, in source order: what the journal stores and the
        acknowledgement and the status board show."""
        return tuple(r for plan in self.sources.values() for r in plan.ranges)

    @property
    def extra(self) -> dict[str, Any]:
        """Every source's JSON data, merged (the keys of different sources never collide)."""
        return {key: value for plan in self.sources.values() for key, value in plan.extra.items()}


def _check_extra_keys(sources: Mapping[str, SourcePlan]) -> None:
    """The journal stores one flat `extra`; two sources with one key could not be told apart."""
    owner: dict[str, str] = {}
    for name, plan in sources.items():
        for key in plan.extra:
            if key in owner:
                msg = (
                    f"sources {owner[key]!r} and {name!r} both plan extra key {key!r}; each "
                    "source must key its plan data by its own name so the journal keeps them apart"
                )
                raise PlanError(msg)
            owner[key] = name
