"""`dstreams checkpoint show|verify`: inspect a stateful job's checkpoints without a driver.

With the job's journal they also say which checkpoints recovery may start from (the retained
ones the journal names); the checkpoints found under the store but not journaled are shown as
left by a crash. `--config job.yaml` names both the store and the journal; `--path` and the
journal's path options (`--file`, or `--kafka/--topic/--app`) win over it. Neither command
writes anything.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from service.cli.journal import JournalSource, _read, _source_options
from service.config.runtime import CheckpointSettings
from service.graph.checkpoint_store import (
    CheckpointError,
    CheckpointStore,
    PieceManifest,
    read_partition,
)
from service.graph.disk_changelog import Lineage
from service.graph.disk_queries import find_offline, key_texts
from service.journal.base import Journal, JournalState
from service.journal.records import CheckpointRecord

DISK_PIECE = "-disk"
"""The ending of a state on disk's piece name (`service.graph.disk_state`)."""


def _store_options(command: Callable[..., None]) -> Callable[..., None]:
    """Adds `--path DIR` and the journal's options, passed on as the journal and the store:
    `--path` when given, else the `checkpoint.path` of the job's `--config`. A store on object
    storage is reached as the config's `checkpoint.s3` says, else as the environment says
    (AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID, ...)."""

    @click.option(
        "--path",
        "root",
        help="the checkpoint store, a directory or s3://BUCKET/PREFIX (default: "
        "checkpoint.path of --config)",
    )
    @_source_options
    @wraps(command)
    def wrapper(source: JournalSource, root: str | None, **kwargs: Any) -> None:
        if source.settings is not None:
            settings = source.settings.checkpoint
            if root is not None:
                settings = settings.model_copy(update={"path": root})
        elif root is not None:
            settings = CheckpointSettings(path=root)
        else:
            msg = "give --path DIR, or --config JOB.yaml whose checkpoint.path names the store"
            raise click.UsageError(msg)
        command(source, settings.store(), **kwargs)

    return wrapper


@click.group()
def checkpoint() -> None:
    """Inspect a job's state checkpoints.

    \b
    Examples:
      dstreams checkpoint show --config config/wordcount.yaml
      dstreams checkpoint show --path state/checkpoints --file state/journal
      dstreams checkpoint show --config config/wordcount.yaml --key spark
      dstreams checkpoint verify --path state/checkpoints --file state/journal
    """


@checkpoint.command()
@_store_options
@click.option(
    "--key",
    help="also print this key's state in each keyed piece (matched by str() or repr() of the "
    "stored key; every part is read)",
)
def show(source: JournalSource, store: CheckpointStore, key: str | None) -> None:
    """Each checkpoint: batch time, pieces, records and bytes, and whether the journal uses it;
    with --key, the key's value in each keyed piece as of that checkpoint's batch."""
    root = store.location
    journaled = _retained(source.journal)
    times = sorted(set(store.batch_times()) | {r.batch_time for r in journaled})
    if not times:
        click.echo(f"{root}: no checkpoints")
    for batch_time in times:
        record = next((r for r in journaled if r.batch_time == batch_time), None)
        role = "journaled" if record is not None else "not journaled (left by a crash)"
        click.echo(f"batch {batch_time}: {role}")
        for name, ref in _refs(store, batch_time, record).items():
            try:
                manifest = store.manifest(ref)
                click.echo(
                    f"  {name}: {manifest.partitions} partitions, "
                    f"{manifest.total_records} records, {manifest.total_bytes} bytes"
                )
                if name.endswith(DISK_PIECE):
                    click.echo(f"    {_disk_state(store, name, ref, manifest, key)}")
                elif key is not None and manifest.fmt != "rows":
                    click.echo(f"    {_key_state(store, ref, manifest, key)}")
            except CheckpointError as error:
                click.echo(f"  {name}: {error}")


def _key_state(store: CheckpointStore, ref: str, manifest: PieceManifest, wanted: str) -> str:
    """`key K = V` for each stored key whose str() or repr() is `wanted` (with the batch time of
    its last value, for state), or that there is none."""
    numbers = [(index, None) for index in range(manifest.partitions)]
    read = read_partition(store.files, ref, manifest.fmt, numbers, manifest.version)
    found = []
    for key, value in read:
        if wanted in (str(key), repr(key)):
            if manifest.fmt == "state":
                _kind, state, touched = value
                found.append(f"key {key!r} = {state!r} (last value in batch {touched})")
            else:
                found.append(f"key {key!r} = {value!r}")
    return "; ".join(found) if found else f"no key {wanted!r}"


def _disk_state(
    store: CheckpointStore, name: str, ref: str, manifest: PieceManifest, wanted: str | None
) -> str:
    """Where a state on disk was at that checkpoint, and with `wanted` the key's state then,
    read from the durable changes and snapshots (`service.graph.disk_queries.find_offline`)."""
    ((meta),) = read_partition(store.files, ref, manifest.fmt, [(0, None)], manifest.version)
    if meta["version"] is None:
        return "state on disk: no batch yet"
    stream = name.removesuffix(DISK_PIECE)
    lineage = Lineage(store.files, stream, meta["origin"], meta["partitions"])
    where = f"state on disk at batch {meta['version']} ({lineage.files.describe(lineage.base)})"
    if wanted is None:
        return where
    found = find_offline(lineage, meta["version"], key_texts(wanted))
    states = "; ".join(f"key {k!r} = {v!r}" for k, v in found) or f"no key {wanted!r}"
    return f"{where}: {states}"


@checkpoint.command()
@_store_options
def verify(source: JournalSource, store: CheckpointStore) -> None:
    """Read every part of the checkpoints recovery may use against its manifest (SHA-256);
    exit 1 when none of them is usable."""
    root = store.location
    journaled = [r for r in _retained(source.journal) if r.refs]
    if not journaled:
        click.echo(f"{source.label}: the journal names no checkpoint with state; nothing to verify")
        return
    usable = 0
    for record in journaled:
        try:
            for ref in record.refs.values():
                store.verify(ref)
            usable += 1
            click.echo(f"batch {record.batch_time}: ok ({len(record.refs)} pieces)")
        except CheckpointError as error:
            click.echo(f"batch {record.batch_time}: damaged: {error}")
    if not usable:
        msg = f"{root}: no usable checkpoint; recovery would refuse to start"
        raise click.ClickException(msg)


def _retained(source: Journal) -> tuple[CheckpointRecord, ...]:
    return JournalState.from_records(_read(source)).retained_checkpoints


def _refs(
    store: CheckpointStore, batch_time: int, record: CheckpointRecord | None
) -> dict[str, str]:
    if record is not None:
        return dict(record.refs)
    return store.pieces(batch_time)
