"""Label schemas: the fields of one annotation form, and the checks of an answer against them.

A schema is a list of fields, each {"name", "type", "required", "description", ...} plus the keys
of its type (apps/annotation/field_types.py, which checks them). Nothing here touches the
database: the same checks serve the API, the page and the exporter.
"""

from __future__ import annotations

import re
from typing import Any

from apps.annotation.field_types import FIELD_TYPES, FormKeys, fail, field_type, short_text

NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_FIELDS = 20


def validate_schema(fields: Any) -> list[dict]:
    """The schema, normalised (defaults filled in). Raises Invalid naming `fields[i].key`."""
    if not isinstance(fields, list) or not fields:
        raise fail("a schema is a non-empty list of fields", "fields")
    if len(fields) > MAX_FIELDS:
        raise fail(f"at most {MAX_FIELDS} fields", "fields")
    normalised, names = [], set()
    # Keys a label names are its own wherever its field comes: handed-out keys go around them.
    keys = FormKeys(named={label.get("hotkey") for spec in fields
                           if isinstance(spec, dict) and isinstance(spec.get("labels"), list)
                           for label in spec["labels"] if isinstance(label, dict)
                           and isinstance(label.get("hotkey"), str)})
    for index, spec in enumerate(fields):
        where = f"fields[{index}]"
        if not isinstance(spec, dict):
            raise fail("each field is an object with a name and a type", where)
        name, kind = spec.get("name"), spec.get("type")
        if not isinstance(name, str) or not NAME.match(name):
            raise fail("name must be lower-case letters, digits and _ (up to 40), starting with a letter",
                       f"{where}.name")
        if name in names:
            raise fail(f"the name '{name}' is used twice", f"{where}.name")
        names.add(name)
        if not isinstance(kind, str) or kind not in FIELD_TYPES:
            raise fail(f"type must be one of {', '.join(FIELD_TYPES)}", f"{where}.type")
        type_ = FIELD_TYPES[kind]
        field = {"name": name, "type": kind, "required": bool(spec.get("required", type_.required_by_default)),
                 "description": short_text(spec.get("description", ""), f"{where}.description", 1000)}
        field.update(type_.clean_spec(spec, where, keys))
        normalised.append(field)
    return normalised


def validate_answer(fields: list[dict], values: Any, row: dict, *, partial: bool = False) -> dict:
    """An answer ({field name: value}) checked against the schema and the example's row
    (span offsets, candidate count). `partial` (drafts) allows missing required fields.
    Raises Invalid naming `values.<field>`."""
    if not isinstance(values, dict):
        raise fail("values is an object of field name to answer", "values")
    by_name = {f["name"]: f for f in fields}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise fail(f"'{unknown[0]}' is not a field of this schema", f"values.{unknown[0]}")
    clean = {}
    for field in fields:
        name, where = field["name"], f"values.{field['name']}"
        value = values.get(name)
        if value is None or value == [] or value == "":
            if field["required"] and not partial:
                raise fail(f"'{name}' is required", where)
            continue
        clean[name] = field_type(field).clean_answer(field, value, row, where)
    return clean

