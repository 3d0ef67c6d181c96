"""Model instances from hand-written SQL, converted as the ORM converts them.

For the statements the ORM cannot express, on the annotation queue's hot path (its candidate
query: apps/annotation/queue.py).
"""

from __future__ import annotations

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model


@cache
def columns(model: type[Model], alias: str) -> str:
    """The model's concrete columns as `alias.column, ...`, in `_meta` order (what `instance` reads)."""
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


def instance(model: type[Model], values) -> Model:
    """A model instance from its concrete columns in `_meta` order: each value through the
    database's and the field's converters (JSON text parsed, SQLite dates read), as the ORM does."""
    db = connections[DEFAULT_DB_ALIAS]  # once: each use of the `connection` proxy is a context-local look-up
    fields = model._meta.concrete_fields
    converted = []
    for field, value in zip(fields, values, strict=True):
        if value is not None:
            column = field.get_col(model._meta.db_table)
            for converter in db.ops.get_db_converters(column) + field.get_db_converters(db):
                value = converter(value, column, db)
        converted.append(value)
    return model.from_db(DEFAULT_DB_ALIAS, [field.attname for field in fields], converted)


def execute(sql: str, params: list):
    """A cursor that has run `sql`; close it (or use it in a `with`)."""
    cursor = connections[DEFAULT_DB_ALIAS].cursor()
    cursor.execute(sql, params)
    return cursor


def rows(sql: str, params: list, *models: type[Model]) -> list[tuple[Model | None, ...]]:
    """Each row of `sql` (which selects `columns(model, ...)` of each of `models`, in that order) as
    one instance per model; a model whose columns are all NULL (an outer join that found
    nothing) gives None."""
    with execute(sql, params) as cursor:
        found = cursor.fetchall()
    result = []
    for values in found:
        instances, at = [], 0
        for model in models:
            width = len(model._meta.concrete_fields)
            part = values[at:at + width]
            instances.append(None if all(value is None for value in part) else instance(model, part))
            at += width
        result.append(tuple(instances))
    return result
