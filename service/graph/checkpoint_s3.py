"""Checkpoint files on S3-compatible object storage (`s3://bucket/prefix`, `s3a://` alike).

`S3Files` is the object-storage `CheckpointFiles` (`service.graph.checkpoint_files`): one object
per file, under the URI's prefix. A PUT is atomic (a reader sees the whole object or none), so a
part or a manifest needs no temporary name; a part larger than `SPOOL_BYTES` is spooled to a
local temporary file and uploaded in parts, which S3 also publishes only when the upload
completes. Objects are never read while they are written: a piece's manifest is its commit point,
written after all its parts, and `checkpoint(t, refs)` is journaled after every manifest.

`S3Files` is pickled into the executors' tasks, so it holds the endpoint, region and addressing
style but no credential: each process (the driver, every Python worker) finds them itself, from
`credentials_file` (an AWS shared-credentials file, e.g. a mounted Kubernetes Secret) when set,
else from botocore's usual chain: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and
`AWS_SESSION_TOKEN`), a web identity (IRSA), the instance's role.
"""

from __future__ import annotations

import contextlib
import functools
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from service.errors import DStreamsError
from service.graph.checkpoint_files import READ_BLOCK

SCHEMES = ("s3", "s3a")
_URI = re.compile(r"(?P<scheme>s3a?)://(?P<bucket>[^/]+)/*(?P<prefix>.*?)/*$", re.IGNORECASE)
SPOOL_BYTES = 8 << 20
"""A part up to this size is held in memory before its PUT; a larger one in a temporary file."""
DELETE_BATCH = 1000
"""S3's limit of keys per DeleteObjects request."""
# The driver and each task retry a failing request this often (botocore's standard mode backs
# off exponentially); a task that still fails is retried by Spark.
_RETRIES = 5
_TIMEOUT_S = 30.0


class ObjectStorageError(DStreamsError):
    """Object storage refused a request or cannot be reached."""


def is_s3_uri(path: str) -> bool:
    return _URI.match(path) is not None


def split_uri(uri: str) -> tuple[str, str]:
    """`(bucket, prefix)` of `s3://bucket/prefix` (or `s3a://`); the prefix without end slashes.

    >>> split_uri("s3a://state/jobs/wordcount/")
    ('state', 'jobs/wordcount')
    """
    match = _URI.match(uri)
    if match is None:
        msg = f"{uri!r} is not an object-storage URI; expected s3://BUCKET/PREFIX or s3a://..."
        raise ValueError(msg)
    return match["bucket"], match["prefix"]


@dataclass(frozen=True)
class S3Endpoint:
    """How to reach the object store; no credential (see the module docstring)."""

    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    credentials_file: str | None = None


@dataclass(frozen=True)
class S3Files:
    """Checkpoint files as the objects under `s3://bucket/prefix/`."""

    bucket: str
    prefix: str
    endpoint: S3Endpoint

    @classmethod
    def at(cls, uri: str, endpoint: S3Endpoint) -> S3Files:
        bucket, prefix = split_uri(uri)
        return cls(bucket, prefix, endpoint)

    def key(self, key: str) -> str:
        return "/".join(part for part in (self.prefix, key) if part)

    def describe(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(key)}"

    @property
    def client(self) -> Any:
        return s3_client(self.endpoint)

    @contextlib.contextmanager
    def writer(self, key: str) -> Iterator[IO[bytes]]:
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            yield spool
            spool.seek(0)
            with _failures("write", self.describe(key)):
                self.client.upload_fileobj(spool, self.bucket, self.key(key))

    def put(self, key: str, data: bytes) -> None:
        with _failures("write", self.describe(key)):
            self.client.put_object(Bucket=self.bucket, Key=self.key(key), Body=data)

    def chunks(self, key: str) -> Iterator[bytes]:
        with _failures("read", self.describe(key)):
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=self.key(key))["Body"]
            except ClientError as error:
                if _missing(error):
                    raise FileNotFoundError(self.describe(key)) from None
                raise
            with contextlib.closing(body):
                yield from body.iter_chunks(READ_BLOCK)

    def size(self, key: str) -> int | None:
        with _failures("look up", self.describe(key)):
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=self.key(key))
            except ClientError as error:
                if _missing(error):
                    return None
                raise
        return int(head["ContentLength"])

    def children(self, key: str = "") -> list[str]:
        """From the keys of the objects under `key`, not from S3's common prefixes: some
        servers (SeaweedFS) list a folder whose objects were all deleted as a prefix still."""
        folder = self.key(key) + "/" if self.key(key) else ""
        names = {name.split("/", 1)[0] for name in self._keys_under(folder) if "/" in name}
        return sorted(names)

    def delete_tree(self, key: str) -> None:
        folder = self.key(key) + "/"
        keys = [{"Key": folder + name} for name in self._keys_under(folder)]
        for start in range(0, len(keys), DELETE_BATCH):
            batch = {"Objects": keys[start : start + DELETE_BATCH], "Quiet": True}
            with _failures("delete", self.describe(key)):
                answer = self.client.delete_objects(Bucket=self.bucket, Delete=batch)
            if answer.get("Errors"):
                first = answer["Errors"][0]
                msg = (
                    f"cannot delete {len(answer['Errors'])} objects under {self.describe(key)}, "
                    f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
                raise ObjectStorageError(msg)

    def _keys_under(self, folder: str) -> Iterator[str]:
        """The keys of every object under `folder` (a prefix ending in `/`), without it."""
        with _failures("list", f"s3://{self.bucket}/{folder}"):
            pages = self.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=folder):
                for item in page.get("Contents", []):
                    yield item["Key"][len(folder) :]

    def sync(self, key: str) -> None:
        """Nothing to do: an object is durable once its PUT has returned."""

    def check_reachable(self) -> None:
        """Raises `ObjectStorageError` unless the bucket answers with these credentials."""
        with _failures("reach the bucket of", self.describe()):
            self.client.head_bucket(Bucket=self.bucket)


@functools.lru_cache(maxsize=8)
def s3_client(endpoint: S3Endpoint) -> Any:
    """One client per endpoint and process (clients are thread-safe; building one is slow)."""
    core = botocore.session.get_session()
    if endpoint.credentials_file is not None:
        # botocore's own reader of the shared-credentials file, pointed at the mounted one.
        core.set_config_variable("credentials_file", endpoint.credentials_file)
    session = boto3.session.Session(botocore_session=core)
    config = Config(
        region_name=endpoint.region,
        s3={"addressing_style": "path" if endpoint.path_style else "auto"},
        retries={"max_attempts": _RETRIES, "mode": "standard"},
        connect_timeout=_TIMEOUT_S,
        read_timeout=_TIMEOUT_S,
        # Checksums only where the API requires one: S3-compatible servers differ in the newer
        # checksum headers, and the manifest's SHA-256 verifies every part anyway.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return session.client("s3", endpoint_url=endpoint.endpoint_url, config=config)


def _missing(error: ClientError) -> bool:
    """Whether S3 answered that the object does not exist (HEAD answers a bare 404)."""
    return str(error.response.get("Error", {}).get("Code", "")) in ("NoSuchKey", "404", "NotFound")


@contextlib.contextmanager
def _failures(action: str, where: str) -> Iterator[None]:
    """Turns botocore's errors into an `ObjectStorageError` naming what was attempted."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise _storage_error(action, where, error) from error


def _storage_error(action: str, where: str, error: Exception) -> ObjectStorageError:
    # botocore's messages name the request, never the credentials.
    msg = (
        f"cannot {action} {where}: {error}. Check checkpoint.s3 (endpoint_url, region, "
        "path_style), that the bucket exists, and the credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY in the environment of the driver and every executor, or "
        "checkpoint.s3.credentials_file"
    )
    return ObjectStorageError(msg)
