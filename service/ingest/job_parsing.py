"""The ingest sources' decoders as the job reads them: the codec and, where the job gives one,
its `parse` function (`ctx.source(name, parse=fn)`).

The endpoint checks every record with the decoder the job's reads will use, so that nothing it
acknowledges can fail the job (docs/architecture.md, "Ingest"). The codec comes from the
source's settings; the parse function only from the job's code, so the job's graph is built here
as a driver builds it before Spark starts: no Spark, outputs into memory sinks that never run.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

from connectors.codecs import Codec, resolve_codec
from service.config.settings import Settings
from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.graph.kafka_source import KafkaSource
from service.graph.sources import KafkaInputDStream

log = logging.getLogger(__name__)


def source_decoders(settings: Settings, names: list[str]) -> dict[str, Codec]:
    """Source name -> its decoder, for each of `names`: the job's (with its parse function)
    where the job reads the source, else the one the source's settings give."""
    registry = settings.schema_registry
    decoders = {name: resolve_codec(settings.sources[name].decoder(registry)) for name in names}
    try:
        from_job = _job_decoders(settings)
    except Exception as error:  # the job's own code, run outside its driver: anything can fail
        log.warning(
            "the job %s could not be built in the ingest endpoint (%s: %s); records are checked "
            "with the sources' codecs only, not with the job's parse functions",
            settings.job,
            type(error).__name__,
            error,
        )
        return decoders
    decoders.update({name: d for name, d in from_job.items() if name in decoders})
    return decoders


def _job_decoders(settings: Settings) -> dict[str, Codec]:
    from sinks.memory import MemorySink

    ctx = StreamingContext(
        None,
        settings.app_id,
        settings.batch_interval_ms,
        settings.default_partitions,
        sink_factory=lambda _name: MemorySink(),
        source_factory=lambda name: _source(settings, name),
    )
    try:
        _job(settings.job)(ctx)
        return {
            stream.source.name: resolve_codec(stream.source.reads_with)
            for stream in ctx.inputs
            if isinstance(stream, KafkaInputDStream)
        }
    finally:
        ctx.close()


def _source(settings: Settings, name: str) -> KafkaSource:
    source = settings.sources.get(name)
    if source is None:
        msg = f"the job reads source {name!r}, which is not configured"
        raise ConfigError(msg)
    return source.build(name, settings.kafka, settings.app_id, settings.schema_registry)


def _job(reference: str) -> Callable[[StreamingContext], object]:
    module_name, _, function_name = reference.partition(":")
    try:
        job = getattr(importlib.import_module(module_name), function_name, None)
    except ImportError as error:
        msg = f"job {reference!r}: cannot import module {module_name!r} ({error})"
        raise ConfigError(msg) from error
    if not callable(job):
        msg = f"job {reference!r}: module {module_name!r} has no function {function_name!r}"
        raise ConfigError(msg)
    return job  # type: ignore[no-any-return] # checked callable above
