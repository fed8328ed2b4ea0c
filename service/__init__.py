"""The dstreams driver: graph, scheduler, journal, recovery, metrics and CLI."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The installed distribution's metadata is the one place the version is written
    # (pyproject.toml), so `dstreams --version`, the metrics' build info and image tags agree.
    __version__ = version("kafka-dstreams")
except PackageNotFoundError:  # imported from a source tree that was never `pip install`ed
    __version__ = "0+unknown"
