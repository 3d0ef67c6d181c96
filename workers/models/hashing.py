"""A registered model's content hash: what its weights are, independent of where they lie.

The hash covers the safetensors files that `from_pretrained` reads (the index's shards or
model.safetensors), each by name and SHA-256 of its bytes, so the same weights copied elsewhere
hash the same and one changed byte changes it. Reading gigabytes takes a while: a worker
computes it once and the registry stores it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import ModelFormatError
from .hf_dir import weight_files

CHUNK = 4 * 2**20


def weights_content_hash(directory: Path) -> str:
    """sha256 hex of a safetensors model directory's weight files (name and bytes of each)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelFormatError("A content hash is taken of a safetensors model directory.")
    top = {entry.name for entry in directory.iterdir() if entry.is_file()}
    combined = hashlib.sha256()
    for path in weight_files(directory, top):
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
        combined.update(f"{path.name}\0{digest.hexdigest()}\n".encode())
    return combined.hexdigest()
