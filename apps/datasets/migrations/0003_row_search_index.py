"""Full-text search over rows: PostgreSQL GIN on a tsvector expression, SQLite FTS5."""

from django.db import migrations

PG_INDEX = """
CREATE INDEX IF NOT EXISTS datasets_row_search ON datasets_datasetrow
USING GIN (to_tsvector('simple', coalesce(prompt, '') || ' ' || coalesce(response, '') || ' ' ||
                                 coalesce(reference, '')))
"""

SQLITE_FTS = [
    """CREATE VIRTUAL TABLE IF NOT EXISTS datasets_row_fts USING fts5(
           prompt, response, reference, content='datasets_datasetrow', content_rowid='id')""",
    """CREATE TRIGGER IF NOT EXISTS datasets_row_fts_insert AFTER INSERT ON datasets_datasetrow BEGIN
           INSERT INTO datasets_row_fts(rowid, prompt, response, reference)
           VALUES (new.id, new.prompt, new.response, new.reference);
       END""",
    """CREATE TRIGGER IF NOT EXISTS datasets_row_fts_delete AFTER DELETE ON datasets_datasetrow BEGIN
           INSERT INTO datasets_row_fts(datasets_row_fts, rowid, prompt, response, reference)
           VALUES ('delete', old.id, old.prompt, old.response, old.reference);
       END""",
]


def create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    statements = [PG_INDEX] if vendor == "postgresql" else SQLITE_FTS if vendor == "sqlite" else []
    for statement in statements:
        schema_editor.execute(statement)


def drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS datasets_row_search")
    elif vendor == "sqlite":
        for name in ("datasets_row_fts_insert", "datasets_row_fts_delete"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
        schema_editor.execute("DROP TABLE IF EXISTS datasets_row_fts")


class Migration(migrations.Migration):
    dependencies = [("datasets", "0002_datasetrow_datasetversion_importjob_and_more")]
    operations = [migrations.RunPython(create, drop)]
