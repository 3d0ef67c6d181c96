"""Full-text search on PostgreSQL moves from a GIN index on the row table, kept current row by
row during every import, to one index per version built once the version is ready
(apps.datasets.search_index): a partition of datasets_rowsearch. Versions that exist already
are indexed by a worker the first time somebody searches them (until then a search scans)."""

from django.db import migrations, models

CREATE = [
    "DROP INDEX IF EXISTS datasets_row_search",
    """CREATE TABLE IF NOT EXISTS datasets_rowsearch (version_id bigint, row_id bigint, position integer,
                                                     document tsvector)
       PARTITION BY LIST (version_id)""",
    "CREATE INDEX IF NOT EXISTS datasets_rowsearch_document ON datasets_rowsearch USING GIN (document)",
]


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in CREATE:
            schema_editor.execute(statement)
    elif schema_editor.connection.vendor == "sqlite":
        # SQLite altered the row table by making it anew, and its FTS5 triggers went with the old one.
        _sqlite_triggers_again(schema_editor)


def _sqlite_triggers_again(schema_editor):
    from importlib import import_module

    for statement in import_module("apps.datasets.migrations.0003_row_search_index").SQLITE_FTS:
        schema_editor.execute(statement)
    schema_editor.execute("INSERT INTO datasets_row_fts(datasets_row_fts) VALUES ('rebuild')")


def sqlite_triggers_again(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        _sqlite_triggers_again(schema_editor)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from importlib import import_module

        schema_editor.execute("DROP TABLE IF EXISTS datasets_rowsearch CASCADE")  # its partitions with it
        schema_editor.execute(import_module("apps.datasets.migrations.0003_row_search_index").PG_INDEX)


class Migration(migrations.Migration):
    dependencies = [("datasets", "0011_version_purge")]
    operations = [
        migrations.AddField(model_name="datasetversion", name="search_indexed_at",
                            field=models.DateTimeField(blank=True, null=True)),
        # Undoing the change below makes SQLite's row table anew again: its triggers then, too.
        migrations.RunPython(migrations.RunPython.noop, sqlite_triggers_again),
        migrations.AlterField(model_name="datasetrow", name="version",
                              field=models.ForeignKey(db_index=False, on_delete=models.deletion.CASCADE,
                                                      related_name="rows", to="datasets.datasetversion")),
        migrations.RunPython(create, drop),
    ]
