"""Fixtures for the ingest engine tests. No database: they exercise the plain-Python engine
in workers/ingest (pytest-django still configures Django, which they never import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workers.ingest_files import ROWS, write_all_formats


@pytest.fixture(scope="session")
def all_formats(tmp_path_factory) -> dict[str, Path]:
    """rows.jsonl, rows.json, rows.csv, rows.tsv, a ;-separated CSV, rows.parquet, a datasets
    folder, rows.jsonl.gz and a zip holding the CSV: the same ROWS in each."""
    return write_all_formats(ROWS, tmp_path_factory.mktemp("formats"))
