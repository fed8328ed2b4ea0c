"""A class-data sharing archive for the driver's JVM, which takes about a second off Spark's start
(docs/architecture.md, Performance notes).

Most of a SparkContext's start is the JVM loading, parsing and verifying thousands of classes.
With class-data sharing the JVM maps them, already parsed, from an archive instead. A JVM started
with `-XX:ArchiveClassesAtExit` writes such an archive of every class it loaded when it exits;
`build` has one run a short local Spark job like a batch's. An archive is only valid for the JVM
build and the class path that wrote it, so its file name carries both (`default_path`); a JVM
given an archive it cannot use carries on without it. A truncated archive crashes the JVM, so an
archive appears under its name only complete (written under a temporary name, renamed) and only
after a JVM has started Spark with it (`-Xshare:on`, which refuses an archive it cannot use).

The two JVM runs `build` makes are `service.driver.class_archive_runs`, each in a process of its
own (the JVM writes the archive only when it exits).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from service.errors import DStreamsError

log = logging.getLogger(__name__)
ARCHIVE_DIR_ENV = "DSTREAMS_CLASS_ARCHIVE_DIR"
# The JVM's notes about classes it cannot archive, or an archive it cannot use, are not ours
# to print: the JVM falls back to loading classes itself.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
BUILD_TIMEOUT_S = 300.0
TRAINING_MODULE = "service.driver.class_archive_runs"


class ClassArchiveError(DStreamsError):
    """Building the archive failed; Spark still starts without one, only slower."""


def default_path() -> Path:
    """Where the archive for this JVM and this pyspark lives: `$DSTREAMS_CLASS_ARCHIVE_DIR`,
    else the user's cache directory."""
    import pyspark

    folder = os.environ.get(ARCHIVE_DIR_ENV)
    if not folder:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = str(Path(cache) / "dstreams")
    return Path(folder) / f"spark-{pyspark.__version__}-{_jvm_fingerprint()}.jsa"


def _jvm_fingerprint() -> str:
    """Identifies the JVM binary spark-submit runs and the pyspark jars it loads."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or "java"
    real = Path(java).resolve()
    stat = real.stat() if real.exists() else None
    parts = [str(real), str(stat.st_size if stat else 0), str(stat.st_mtime_ns if stat else 0)]
    parts.append(str(Path(pyspark.__file__).resolve().parent))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def resolve(setting: str | Path | None) -> Path | None:
    """The archive a `spark.class_archive` setting names: "auto" is `default_path()`, "off" (or
    None) none, anything else a path."""
    if setting is None or setting == "off":
        return None
    return default_path() if setting == "auto" else Path(setting)


def describe_archive(setting: str | Path | None) -> str:
    """For the start-up log line: the archive used, or why none."""
    path = resolve(setting)
    if path is None:
        return "off"
    if path.is_file():
        return str(path)
    return f"none at {path} (`dstreams dev class-archive` builds it)"


def java_options(path: Path | None) -> str:
    """The driver JVM's options that use the archive at `path`, if there is one."""
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {QUIET}"


def build(path: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Writes the archive (at `default_path()` unless told), replacing any older one."""
    target = path or default_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _run_step("train", temp, timeout_s)
        if not temp.is_file() or temp.stat().st_size == 0:
            msg = f"the JVM wrote no class archive at {temp}"
            raise ClassArchiveError(msg)
        verify(temp, timeout_s)
        temp.replace(target)
    finally:
        temp.unlink(missing_ok=True)
    return target


def verify(archive: Path, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """Raises `ClassArchiveError` unless a JVM starts Spark with `archive` and runs a job."""
    _run_step("check", archive, timeout_s)


def _run_step(step: str, archive: Path, timeout_s: float) -> None:
    command = [sys.executable, "-m", TRAINING_MODULE, step, str(archive.resolve())]
    # In a folder of its own: a JVM that crashes on a damaged archive leaves its error file in
    # its working directory.
    with tempfile.TemporaryDirectory(prefix="dstreams-class-archive-") as folder:
        done = subprocess.run(  # noqa: S603 - this interpreter, this module, our arguments
            command, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=folder
        )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        msg = f"class archive {step} step failed (exit {done.returncode}):\n{tail}"
        raise ClassArchiveError(msg)
