"""Write a new dataset version from records made inside the product (annotation exports,
comparison votes), through the same canonical rows, hashing and stats as an import.

The version stays BUILDING until its last row is in; any error removes it and its rows, so
nothing half-written is left behind. Call it from a worker task for anything large.
"""

from collections.abc import Iterable

from django.db import transaction

from apps.datasets import search_index
from apps.datasets.bulk import VersionTally, insert_rows, stored_tallies
from apps.datasets.importer import BATCH_ROWS, check_lengths, discard_version, next_version_number
from apps.datasets.models import Dataset, DatasetVersion
from workers.ingest import ColumnMapping, IngestError, canonical_row


def write_version(*, dataset: Dataset, records: Iterable[dict], roles: dict[str, str], author=None,
                  parent: DatasetVersion | None = None, message: str = "", source: dict | None = None,
                  splits: Iterable[str] | None = None) -> DatasetVersion:
    """A READY version of `dataset` holding `records` ({column: value} dicts), with `roles`
    mapping columns to row roles as an import's column mapping does; every other column is
    kept as metadata. `splits`, when given, is each record's split, in order.
    Raises IngestError (naming the record, 1-based) for a record that breaks the row rules."""
    mapping = ColumnMapping(roles=roles)
    with transaction.atomic():
        version = DatasetVersion.objects.create(
            dataset=dataset, number=next_version_number(dataset), parent=parent, author=author, message=message,
            source=source or {})
    try:
        _write_rows(version, records, mapping, splits)
    except BaseException:
        discard_version(version)
        raise
    return version


def _write_rows(version: DatasetVersion, records: Iterable[dict], mapping: ColumnMapping, splits) -> None:
    tally = VersionTally()
    split_of = iter(splits) if splits is not None else None
    batch: list[tuple] = []
    position = 0
    for number, record in enumerate(records, start=1):
        row = canonical_row(record, mapping, number)
        check_lengths(row, mapping, number)
        split = next(split_of, "") if split_of is not None else ""
        batch.append(tally.row(version.pk, position, row, split or ""))
        position += 1
        if len(batch) >= BATCH_ROWS:
            insert_rows(batch)
            batch.clear()
    insert_rows(batch)
    if position == 0:
        raise IngestError("no rows to write")
    version.row_count = position
    version.content_hash = tally.hasher.hexdigest()
    version.schema = {"roles": dict(mapping.roles), "metadata_keys": sorted(tally.metadata_keys)}
    version.stats = {**tally.stats.as_dict(), **stored_tallies(version.pk)}
    version.status = DatasetVersion.Status.READY
    version.save(update_fields=["row_count", "content_hash", "schema", "stats", "status"])
    search_index.after_ready(version)
