"""The `datasets` folder an export writes: its fingerprint follows the rows, so `datasets`' cache
never hands one version's map() results to another."""

import datasets
import pytest

from workers.ingest.export import write_datasets_dir

pytestmark = pytest.mark.timeout(120)


def rows(responses):
    return [{"id": str(i), "prompt": f"q{i}", "response": r, "metadata": {}} for i, r in enumerate(responses)]


def fingerprint(directory) -> str:
    return datasets.load_from_disk(str(directory))._fingerprint


def test_the_fingerprint_changes_with_the_rows_not_with_their_count(tmp_path):
    write_datasets_dir(rows(["a", "b"]), tmp_path / "v1")
    write_datasets_dir(rows(["a", "changed"]), tmp_path / "v2")
    write_datasets_dir(rows(["a", "b"]), tmp_path / "v1-again")
    assert fingerprint(tmp_path / "v1") != fingerprint(tmp_path / "v2")
    assert fingerprint(tmp_path / "v1") == fingerprint(tmp_path / "v1-again")
