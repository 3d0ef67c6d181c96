"""Content-addressed artifact storage: files are kept once, under their SHA-256.

Two backends behind the same functions:
- a local folder, ARTIFACT_ROOT/blobs/<2>/<sha256> (the default);
- an S3-compatible bucket when ARTIFACT_S3_BUCKET is set: objects <ARTIFACT_S3_PREFIX><sha256>.

Writers stream through a local temporary file, so memory stays bounded, and publish atomically
(local: rename; S3: an object exists only once its upload completed), so a reader never sees half
a file. Readers that need a file on disk (format detection, the ingest engine) ask local_blob():
with S3 it is downloaded once into ARTIFACT_ROOT/blob-cache and its hash checked before use.
"""

import hashlib
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

CHUNK = 1024 * 1024


class CorruptBlob(OSError):
    """What the bucket returned does not hash to the name it is stored under."""


def _checked(sha256: str) -> str:
    # Digests become file names and object keys: only 64 lowercase hex characters, never a path.
    if not isinstance(sha256, str) or len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError("not a sha256 hex digest")
    return sha256


def blob_path(sha256: str) -> Path:
    """Where the local backend keeps a blob (readers should use local_blob, which works for both)."""
    sha256 = _checked(sha256)
    return Path(settings.ARTIFACT_ROOT) / "blobs" / sha256[:2] / sha256


def _cache_path(sha256: str) -> Path:
    sha256 = _checked(sha256)
    return Path(settings.ARTIFACT_ROOT) / "blob-cache" / sha256[:2] / sha256


def _s3_enabled() -> bool:
    return bool(settings.ARTIFACT_S3_BUCKET)


@lru_cache(maxsize=4)
def _s3_client(endpoint_url: str | None, region: str | None, addressing_style: str):
    import boto3  # only S3 deployments pay for importing it
    from botocore.config import Config

    # Own session: boto3's default one is not safe to share between threads.
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name=region,
        config=Config(s3={"addressing_style": addressing_style}, retries={"mode": "standard"}))


def _s3():
    return _s3_client(settings.ARTIFACT_S3_ENDPOINT_URL, settings.ARTIFACT_S3_REGION,
                      settings.ARTIFACT_S3_ADDRESSING_STYLE)


def upload_encryption() -> dict:
    """The server-side encryption every upload asks for (ARTIFACT_S3_SSE), as boto3's ExtraArgs."""
    if not settings.ARTIFACT_S3_SSE:
        return {}
    extra = {"ServerSideEncryption": settings.ARTIFACT_S3_SSE}
    if settings.ARTIFACT_S3_SSE_KMS_KEY_ID:
        extra["SSEKMSKeyId"] = settings.ARTIFACT_S3_SSE_KMS_KEY_ID
    return extra


def _s3_key(sha256: str) -> str:
    return settings.ARTIFACT_S3_PREFIX + _checked(sha256)


def _is_not_found(exc) -> bool:
    return exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}


def _s3_exists(sha256: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        _s3().head_object(Bucket=settings.ARTIFACT_S3_BUCKET, Key=_s3_key(sha256))
    except ClientError as exc:
        # Without s3:ListBucket, S3 answers 403 for a missing key: upload then (same bytes, harmless).
        if _is_not_found(exc) or exc.response.get("Error", {}).get("Code") == "403":
            return False
        raise
    return True


def store_stream(stream: BinaryIO) -> tuple[str, int]:
    """Store a stream; returns (sha256, size). An identical file is stored only once."""
    # Spooled next to where the file ends up locally, so publishing it is a rename.
    root = Path(settings.ARTIFACT_ROOT) / ("blob-cache" if _s3_enabled() else "blobs")
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with tempfile.NamedTemporaryFile(dir=root, prefix=".incoming-", delete=False) as temp:
        try:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                temp.write(chunk)
                size += len(chunk)
        except BaseException:
            os.unlink(temp.name)
            raise
    sha256 = digest.hexdigest()
    try:
        if _s3_enabled():
            if not _s3_exists(sha256):  # else deduplicated
                # Managed transfer: multipart above 8 MB, aborted (nothing left) if it fails.
                _s3().upload_file(temp.name, settings.ARTIFACT_S3_BUCKET, _s3_key(sha256),
                                  ExtraArgs=upload_encryption())
            target = _cache_path(sha256)  # we just hashed it: a verified copy for local readers
        else:
            target = blob_path(sha256)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp.name, target)
    finally:
        if os.path.exists(temp.name):
            os.unlink(temp.name)
    if _s3_enabled():
        _evict_cache(keep=target)
    return sha256, size


def store_file(path: Path) -> tuple[str, int]:
    with open(path, "rb") as handle:
        return store_stream(handle)


def _evict_cache(keep: Path) -> None:
    """Keep the local copies of bucket blobs under ARTIFACT_BLOB_CACHE_MAX_BYTES: the least
    recently used go first (each use touches its file), `keep` never. An evicted blob is only
    downloaded again when read again; a reader that has it open keeps reading it."""
    root = Path(settings.ARTIFACT_ROOT) / "blob-cache"
    files = []
    for path in root.glob("*/*"):
        try:
            files.append((path.stat().st_mtime, path.stat().st_size, path))
        except FileNotFoundError:  # evicted by another process meanwhile
            continue
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= settings.ARTIFACT_BLOB_CACHE_MAX_BYTES:
            break
        if path != keep and not path.name.startswith("."):
            path.unlink(missing_ok=True)
            total -= size


def local_blob(sha256: str) -> Path:
    """A local file with the blob's content, for readers that need a path.

    S3: downloaded once into the cache (under a temporary name, renamed only after its SHA-256
    matched), so concurrent readers never see a partial or corrupt file. The cache may be emptied
    at any time; blobs are fetched again on demand."""
    if not _s3_enabled():
        return blob_path(sha256)
    target = _cache_path(sha256)
    if target.exists():
        os.utime(target)  # recently used: evicted last
        return target
    from botocore.exceptions import ClientError

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".download-")
    os.close(fd)
    try:
        try:
            _s3().download_file(settings.ARTIFACT_S3_BUCKET, _s3_key(sha256), temp)
        except ClientError as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(f"blob {sha256} is not in the artifact bucket") from None
            raise
        digest = hashlib.sha256()
        with open(temp, "rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            raise CorruptBlob(f"blob {sha256} in the artifact bucket is corrupt (its content hashes to "
                              f"{digest.hexdigest()})")
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    _evict_cache(keep=target)
    return target


def open_blob(sha256: str) -> BinaryIO:
    return open(local_blob(sha256), "rb")


def copy_blob_to(sha256: str, destination: Path) -> None:
    with open_blob(sha256) as source, open(destination, "wb") as target:
        shutil.copyfileobj(source, target, CHUNK)
