"""Idempotent sinks: one destination per module, each implementing `sinks.base.Sink`."""

from sinks.base import BatchKey, Sink, WriteResult

__all__ = ["BatchKey", "Sink", "WriteResult"]
