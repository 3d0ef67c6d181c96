"""Durable writes for directories the engine publishes by rename (model conversions,
training checkpoints): everything fsynced before the rename, the parent after it, so a
crash leaves either the old state or the complete new one."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_tree(directory: Path) -> None:
    """fsync every file below `directory` and every directory in it."""
    for current, _, files in os.walk(directory):
        for name in files:
            with open(Path(current, name), "rb") as handle:
                os.fsync(handle.fileno())
        fsync_directory(Path(current))


def fsync_directory(directory: Path) -> None:
    """fsync a directory's entries (a rename inside it becomes durable)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
