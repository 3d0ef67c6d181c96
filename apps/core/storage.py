"""Content-addressed artifact storage: files are kept once, under their SHA-256.

Two backends behind the same functions:
- a local folder, ARTIFACT_ROOT/blobs/<2>/<sha256> (the default);
- an S3-compatible bucket when ARTIFACT_S3_BUCKET is set: objects <ARTIFACT_S3_PREFIX><sha256>.

Writers stream through a local temporary file, so memory stays bounded, and publish atomically
(local: rename; S3: an object exists only once its upload completed), so a reader never sees half
a file. Readers that need a file on disk (format detection, the ingest engine) ask local_blob():
with S3 it is downloaded once into ARTIFACT_ROOT/blob-cache and its hash checked before use.

With the bucket, whole folders (a training checkpoint, an adapter) are kept too, under a key prefix
the caller names: put_folder, folder_names, get_folder, delete_folder (below).
"""

import hashlib
import json
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


# --- folders in the bucket: a directory's files under a key prefix, trusted only through a manifest --
# put_folder uploads every file, then the manifest (each file's SHA-256 and size) last. Readers trust
# only a folder with a manifest and check each file they download against it, so neither a writer
# killed mid-upload nor two writers of one folder can hand a reader a mix of files.

FOLDER_MANIFEST = "MANIFEST.json"
FOLDER_MANIFEST_MAX_BYTES = 1024 * 1024


class CorruptFolder(OSError):
    """A folder's manifest is malformed, or one of its files is missing or differs from it."""


def bucket_enabled() -> bool:
    """Whether an artifact bucket is configured (ARTIFACT_S3_BUCKET): the folder functions need one."""
    return _s3_enabled()


def _folder_prefix(prefix: str) -> str:
    if not prefix.endswith("/") or prefix.startswith("/") or ".." in prefix.split("/"):
        raise ValueError(f"not a folder's key prefix: {prefix!r}")
    return prefix


def _digest_of(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def put_folder(directory: Path, prefix: str) -> dict:
    """Upload the files under `directory` (symbolic links left out) to <prefix><relative path>, then
    the manifest <prefix>MANIFEST.json. Returns the manifest."""
    prefix = _folder_prefix(prefix)
    files = {}
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file() and not p.is_symlink()):
        name = path.relative_to(directory).as_posix()
        if name == FOLDER_MANIFEST:
            raise ValueError(f"{path} has the name of the folder's manifest")
        sha256, size = _digest_of(path)
        _s3().upload_file(str(path), settings.ARTIFACT_S3_BUCKET, prefix + name, ExtraArgs=upload_encryption())
        files[name] = {"sha256": sha256, "bytes": size}
    manifest = {"files": files}
    _s3().put_object(Bucket=settings.ARTIFACT_S3_BUCKET, Key=prefix + FOLDER_MANIFEST,
                     Body=json.dumps(manifest, indent=1).encode(), ContentType="application/json",
                     **upload_encryption())
    return manifest


def folder_names(prefix: str) -> dict[str, bool]:
    """The folders directly under `prefix`, each with whether it is complete (has its manifest)."""
    prefix = _folder_prefix(prefix)
    names: dict[str, bool] = {}
    for page in _s3().get_paginator("list_objects_v2").paginate(Bucket=settings.ARTIFACT_S3_BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            name, _, rest = item["Key"][len(prefix):].partition("/")
            if name and rest:
                names[name] = names.get(name, False) or rest == FOLDER_MANIFEST
    return names


def _manifest_files(body: bytes, prefix: str) -> dict[str, dict]:
    """The files a manifest lists, each name a plain relative path: anything else is CorruptFolder."""
    def corrupt(why: str) -> CorruptFolder:
        return CorruptFolder(f"the manifest of {prefix} {why}")

    if len(body) > FOLDER_MANIFEST_MAX_BYTES:
        raise corrupt(f"is larger than {FOLDER_MANIFEST_MAX_BYTES} bytes")
    try:
        files = json.loads(body)["files"]
    except (ValueError, TypeError, KeyError):
        raise corrupt("is not a JSON object with its files") from None
    if not isinstance(files, dict) or not files:
        raise corrupt("lists no files")
    for name, facts in files.items():
        parts = name.split("/")
        if (name == FOLDER_MANIFEST or "\\" in name or "\0" in name
                or any(part in ("", ".", "..") for part in parts)):
            raise corrupt(f"names a file outside its folder: {name[:200]!r}")
        sha256 = facts.get("sha256") if isinstance(facts, dict) else None
        size = facts.get("bytes") if isinstance(facts, dict) else None
        if (not isinstance(sha256, str) or len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256)
                or type(size) is not int or size < 0):
            raise corrupt(f"has no SHA-256 and size for {name[:200]!r}")
    return files


def folder_manifest(prefix: str) -> dict:
    """The manifest of the folder at `prefix` ({"files": {name: {"sha256", "bytes"}}}), checked as
    get_folder checks it: FileNotFoundError when it has none, CorruptFolder when it is malformed."""
    from botocore.exceptions import ClientError

    prefix = _folder_prefix(prefix)
    try:
        body = _s3().get_object(Bucket=settings.ARTIFACT_S3_BUCKET, Key=prefix + FOLDER_MANIFEST)["Body"].read(
            FOLDER_MANIFEST_MAX_BYTES + 1)
    except ClientError as exc:
        if _is_not_found(exc):
            raise FileNotFoundError(f"{prefix} has no manifest in the artifact bucket") from None
        raise
    return {"files": _manifest_files(body, prefix)}


def get_folder(prefix: str, destination: Path, *, manifest: dict | None = None) -> dict:
    """Download the folder at `prefix` (written by put_folder) into the directory `destination`, each
    file checked against the manifest (`manifest`, from folder_manifest, where the caller read it
    first: the files are then checked against that one). Returns the manifest. FileNotFoundError when
    it has no manifest (incomplete, or not there); CorruptFolder when the manifest is malformed or a
    file is missing or differs (what was downloaded is left for the caller to remove)."""
    from botocore.exceptions import ClientError

    prefix = _folder_prefix(prefix)
    bucket = settings.ARTIFACT_S3_BUCKET
    files = (manifest or folder_manifest(prefix))["files"]
    for name, facts in files.items():
        target = Path(destination, *name.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            _s3().download_file(bucket, prefix + name, str(target))
        except ClientError as exc:
            if _is_not_found(exc):
                raise CorruptFolder(f"{prefix}{name}, in its folder's manifest, is not in the bucket") from None
            raise
        if _digest_of(target) != (facts["sha256"], facts["bytes"]):
            raise CorruptFolder(f"{prefix}{name} differs from its folder's manifest")
    return {"files": files}


def delete_folder(prefix: str) -> None:
    """Delete the folder at `prefix`: its manifest first (readers stop trusting it), then its files."""
    prefix = _folder_prefix(prefix)
    bucket = settings.ARTIFACT_S3_BUCKET
    _s3().delete_object(Bucket=bucket, Key=prefix + FOLDER_MANIFEST)
    keys = [item["Key"] for page in _s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])]
    for start in range(0, len(keys), 1000):  # the most one request deletes
        _s3().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key} for key in keys[start:start + 1000]],
                                                    "Quiet": True})
