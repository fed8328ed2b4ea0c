"""The job's graph: `StreamingContext`, DStreams and their operators, sources and outputs.

The graph describes what each batch computes; it never runs batches (that is `service.driver`).
"""

from service.graph.state_spec import State, StateSpec

__all__ = ["State", "StateSpec"]
