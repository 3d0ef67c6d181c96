"""Content-addressed artifact storage: files are kept once, under their SHA-256.

A local folder by default (ARTIFACT_ROOT). Writers stream, so memory stays bounded, and
publish atomically (temp file + rename), so a reader never sees half a file.
"""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

CHUNK = 1024 * 1024


def blob_path(sha256: str) -> Path:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError("not a sha256 hex digest")
    return Path(settings.ARTIFACT_ROOT) / "blobs" / sha256[:2] / sha256


def store_stream(stream: BinaryIO) -> tuple[str, int]:
    """Store a stream; returns (sha256, size). An identical file is stored only once."""
    root = Path(settings.ARTIFACT_ROOT) / "blobs"
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
    target = blob_path(sha256)
    if target.exists():
        os.unlink(temp.name)  # deduplicated
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp.name, target)
    return sha256, size


def store_file(path: Path) -> tuple[str, int]:
    with open(path, "rb") as handle:
        return store_stream(handle)


def open_blob(sha256: str) -> BinaryIO:
    return open(blob_path(sha256), "rb")


def copy_blob_to(sha256: str, destination: Path) -> None:
    with open_blob(sha256) as source, open(destination, "wb") as target:
        shutil.copyfileobj(source, target, CHUNK)
