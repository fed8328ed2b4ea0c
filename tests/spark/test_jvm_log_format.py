"""The JVM's log lines follow `logging.format`: with json, Spark's structured JSON layout, so one
process writes one format; with text, the plain pattern. Each case starts its own JVM in a child
process (a SparkContext's log configuration is fixed when its JVM starts)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

MARK = "dstreams-log-format-probe"
# The text layout of config/log4j2.properties: "2026-11-26T09:00:00.000+0000 WARN Logger: ...".
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")

CHILD = """
import sys
from service.driver.spark import create_spark_context
sc = create_spark_context("log-format", "local[1]", json_logs=sys.argv[1] == "json",
                          class_archive=None)
jvm = sc._jvm
jvm.org.apache.logging.log4j.LogManager.getLogger("dstreams.probe").warn(sys.argv[2])
sc.parallelize(range(4), 2).count()  # the executor side logs through the same configuration
sc.stop()
"""


def jvm_stderr(json_logs: bool) -> list[str]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "json" if json_logs else "text", MARK],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    return done.stderr.splitlines()


def test_json_format_makes_every_log4j_line_json() -> None:
    lines = jvm_stderr(json_logs=True)
    probes = [json.loads(line) for line in lines if MARK in line]
    assert len(probes) == 1, lines
    assert probes[0]["level"] == "WARN"
    assert probes[0]["msg"] == MARK
    assert probes[0]["logger"] == "probe"
    assert "ts" in probes[0]
    assert not [line for line in lines if TEXT_LINE.match(line)], "a text line in JSON mode"


def test_text_format_keeps_the_pattern_layout() -> None:
    probes = [line for line in jvm_stderr(json_logs=False) if MARK in line]
    assert len(probes) == 1
    assert TEXT_LINE.match(probes[0]), probes[0]
