"""Fixtures of the unit tier."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_spark_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process as an executor or a driver before Spark starts sees it: no running
    SparkContext. A pytest process that ran the Spark tier first still holds that tier's
    context, which decisions made from the running context (`write_from: auto`) would see."""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
