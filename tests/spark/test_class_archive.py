"""Building the driver JVM's class-data archive with a real JVM and Spark, and refusing a damaged
one before it could crash a driver's JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.driver import class_archive

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_an_archive_is_built_checked_and_a_damaged_copy_refused(tmp_path: Path) -> None:
    built = class_archive.build(tmp_path / "spark.jsa")
    assert built == tmp_path / "spark.jsa"
    assert built.stat().st_size > 1_000_000
    assert [p.name for p in tmp_path.iterdir()] == ["spark.jsa"], "no temporary file left"
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(built.read_bytes()[: built.stat().st_size // 3])
    with pytest.raises(class_archive.ClassArchiveError, match="check step failed"):
        class_archive.verify(damaged)
