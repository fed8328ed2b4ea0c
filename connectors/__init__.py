"""Kafka connectors: a driver-side planner and an executor-side reader sharing `OffsetRange`."""

from connectors.offsets import OffsetRange

__all__ = ["OffsetRange"]
