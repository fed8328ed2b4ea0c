"""The dstreams driver: graph, scheduler, journal, recovery, metrics and CLI."""

__version__ = "0.1.0"
