"""Label schemas: the fields of one annotation form, and the checks of an answer against them.

A schema is a list of fields, each {"name", "type", ...}. Types:
- single_label / multi_label: "labels": [{"value", "hotkey"?, "description"?}]; a label without a
  hotkey gets the next free one of HOTKEYS (1-9, then letters the page does not keep, then those
  letters with Shift);
- text: free text ("max_length", "prefill": "response" | "suggestion" | "" — what the editor starts
  with; the page shows the diff against it);
- rating: one named criterion, an integer in ["min", "max"] with an optional description per value;
- preference: pick among the example's candidate responses — "candidates": row paths (e.g.
  ["response", "metadata.response_b"]); the answer is "A", "B", ... (A = first candidate),
  "tie" or "both_bad";
- ranking: the candidates ordered best first (a permutation of "A", "B", ...);
- spans: highlighted character ranges of the example's "source" text ("prompt" or "response"),
  each with one of "labels".
Nothing here touches the database: the same checks serve the API, the page and the exporter.
"""

from __future__ import annotations

import re
import string
from typing import Any

from apps.core.errors import Invalid

FIELD_TYPES = ("single_label", "multi_label", "text", "rating", "preference", "ranking", "spans")
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_FIELDS = 20
MAX_LABELS = 50
MAX_TEXT = 20_000  # characters: a long ideal response fits; a pasted book does not
MAX_SPANS = 200
PREFERENCE_EXTRA = ("tie", "both_bad")
# Keys the annotation page keeps for itself: s skips, ? shows the shortcuts, a-h pick a
# preference's responses, t and x are tie and both bad.
RESERVED_KEYS = frozenset("s?abcdefghtx")
_FREE_LETTERS = [c for c in string.ascii_lowercase if c not in RESERVED_KEYS]
# Handed out in this order to labels that name none: every label of a form up to this many
# (39) has a key; a label past them (a form can hold more) has none.
HOTKEYS = tuple("123456789") + tuple(_FREE_LETTERS) + tuple(c.upper() for c in _FREE_LETTERS)
CANDIDATE_PATH = re.compile(r"^(prompt|response|reference|metadata\.[A-Za-z0-9_\-]{1,64})$")


def _fail(message: str, field: str) -> Invalid:
    return Invalid(message, field=field)


def candidate_keys(count: int) -> list[str]:
    return list(string.ascii_uppercase[:count])


def validate_schema(fields: Any) -> list[dict]:
    """The schema, normalised (defaults filled in). Raises Invalid naming `fields[i].key`."""
    if not isinstance(fields, list) or not fields:
        raise _fail("a schema is a non-empty list of fields", "fields")
    if len(fields) > MAX_FIELDS:
        raise _fail(f"at most {MAX_FIELDS} fields", "fields")
    normalised, names, hotkeys = [], set(), set()
    # Keys a label names are its own wherever its field comes: handed-out keys go around them.
    named = {label.get("hotkey") for spec in fields if isinstance(spec, dict) and isinstance(spec.get("labels"), list)
             for label in spec["labels"] if isinstance(label, dict) and isinstance(label.get("hotkey"), str)}
    for index, spec in enumerate(fields):
        where = f"fields[{index}]"
        if not isinstance(spec, dict):
            raise _fail("each field is an object with a name and a type", where)
        name, kind = spec.get("name"), spec.get("type")
        if not isinstance(name, str) or not NAME.match(name):
            raise _fail("name must be lower-case letters, digits and _ (up to 40), starting with a letter",
                        f"{where}.name")
        if name in names:
            raise _fail(f"the name '{name}' is used twice", f"{where}.name")
        names.add(name)
        if kind not in FIELD_TYPES:
            raise _fail(f"type must be one of {', '.join(FIELD_TYPES)}", f"{where}.type")
        field = {"name": name, "type": kind, "required": bool(spec.get("required", kind != "text")),
                 "description": _short_text(spec.get("description", ""), f"{where}.description", 1000)}
        if kind in ("single_label", "multi_label", "spans"):
            field["labels"] = _labels(spec.get("labels"), where, hotkeys, named, auto_hotkeys=kind != "spans")
        if kind == "spans":
            source = spec.get("source", "response")
            if source not in ("prompt", "response"):
                raise _fail("source must be 'prompt' or 'response'", f"{where}.source")
            field["source"] = source
        if kind == "text":
            field["max_length"] = _int(spec.get("max_length", MAX_TEXT), f"{where}.max_length", 1, MAX_TEXT)
            prefill = spec.get("prefill", "")
            if prefill not in ("", "response", "suggestion"):
                raise _fail("prefill must be '', 'response' or 'suggestion'", f"{where}.prefill")
            field["prefill"] = prefill
        if kind == "rating":
            low = _int(spec.get("min", 1), f"{where}.min", 0, 100)
            high = _int(spec.get("max", 5), f"{where}.max", 1, 100)
            if high <= low:
                raise _fail("max must be greater than min", f"{where}.max")
            field["min"], field["max"] = low, high
            scale = spec.get("scale", {})
            if not isinstance(scale, dict):
                raise _fail("scale maps a value to its description", f"{where}.scale")
            field["scale"] = {str(k): _short_text(v, f"{where}.scale.{k}", 300) for k, v in scale.items()}
        if kind in ("preference", "ranking"):
            candidates = spec.get("candidates", ["response", "metadata.response_b"])
            if (not isinstance(candidates, list) or not 2 <= len(candidates) <= 8
                    or not all(isinstance(c, str) and CANDIDATE_PATH.match(c) for c in candidates)):
                raise _fail("candidates is a list of 2 to 8 row paths: prompt, response, reference or metadata.<key>",
                            f"{where}.candidates")
            field["candidates"] = candidates
        normalised.append(field)
    return normalised


def _labels(labels: Any, where: str, hotkeys: set, named: set, *, auto_hotkeys: bool) -> list[dict]:
    """Labels with their hotkeys; the form's hotkeys are unique across its fields (HOTKEYS given
    out in order where none is named, skipping those named anywhere in the form)."""
    if not isinstance(labels, list) or not labels:
        raise _fail("labels is a non-empty list", f"{where}.labels")
    if len(labels) > MAX_LABELS:
        raise _fail(f"at most {MAX_LABELS} labels", f"{where}.labels")
    result, values = [], set()
    for i, label in enumerate(labels):
        if isinstance(label, str):
            label = {"value": label}
        if not isinstance(label, dict) or not isinstance(label.get("value"), str) or not label["value"].strip():
            raise _fail("each label has a non-empty text value", f"{where}.labels[{i}]")
        value = _short_text(label["value"], f"{where}.labels[{i}].value", 100)
        if value in values:
            raise _fail(f"the label '{value}' is listed twice", f"{where}.labels[{i}].value")
        values.add(value)
        hotkey = label.get("hotkey")
        if hotkey is None and auto_hotkeys:
            hotkey = next((key for key in HOTKEYS if key not in hotkeys and key not in named), None)
        if hotkey is not None:
            if (not isinstance(hotkey, str) or len(hotkey) != 1 or hotkey.lower() in RESERVED_KEYS
                    or not hotkey.isprintable() or hotkey.isspace()):
                raise _fail("a hotkey is one printable character, not one the page keeps (s ? a-h t x)",
                            f"{where}.labels[{i}].hotkey")
            if hotkey in hotkeys:
                raise _fail(f"the hotkey '{hotkey}' is used twice", f"{where}.labels[{i}].hotkey")
            hotkeys.add(hotkey)
        result.append({"value": value, "hotkey": hotkey,
                       "description": _short_text(label.get("description", ""), f"{where}.labels[{i}].description",
                                                  300)})
    return result


def _short_text(value: Any, where: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _fail("must be text", where)
    if len(value) > limit:
        raise _fail(f"at most {limit} characters", where)
    return value


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(f"must be a whole number from {low} to {high}", where)
    return value


def _text_length(row: dict, path: str) -> int:
    text = row_value(row, path)
    return len(text) if isinstance(text, str) else 0


def row_value(row: dict, path: str) -> Any:
    """A row's value at a candidate path ("response", "metadata.response_b")."""
    if path.startswith("metadata."):
        return (row.get("metadata") or {}).get(path.split(".", 1)[1])
    return row.get(path)


def validate_answer(fields: list[dict], values: Any, row: dict, *, partial: bool = False) -> dict:
    """An answer ({field name: value}) checked against the schema and the example's row
    (span offsets, candidate count). `partial` (drafts) allows missing required fields.
    Raises Invalid naming `values.<field>`."""
    if not isinstance(values, dict):
        raise _fail("values is an object of field name to answer", "values")
    by_name = {f["name"]: f for f in fields}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise _fail(f"'{unknown[0]}' is not a field of this schema", f"values.{unknown[0]}")
    clean = {}
    for field in fields:
        name, where = field["name"], f"values.{field['name']}"
        value = values.get(name)
        if value is None or value == [] or value == "":
            if field["required"] and not partial:
                raise _fail(f"'{name}' is required", where)
            continue
        clean[name] = _check_value(field, value, row, where)
    return clean


def _check_value(field: dict, value: Any, row: dict, where: str) -> Any:
    kind = field["type"]
    allowed = [label["value"] for label in field.get("labels", [])]
    if kind == "single_label":
        if not isinstance(value, str) or value not in allowed:
            raise _fail(f"{value!r} is not a label of '{field['name']}' ({', '.join(allowed)})", where)
        return value
    if kind == "multi_label":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _fail("a list of labels", where)
        bad = next((v for v in value if v not in allowed), None)
        if bad is not None:
            raise _fail(f"{bad!r} is not a label of '{field['name']}' ({', '.join(allowed)})", where)
        return sorted(set(value), key=allowed.index)
    if kind == "text":
        if not isinstance(value, str):
            raise _fail("must be text", where)
        if len(value) > field["max_length"]:
            raise _fail(f"at most {field['max_length']} characters (got {len(value)})", where)
        return value
    if kind == "rating":
        if isinstance(value, bool) or not isinstance(value, int) or not field["min"] <= value <= field["max"]:
            raise _fail(f"a whole number from {field['min']} to {field['max']}", where)
        return value
    keys = candidate_keys(len(field.get("candidates", [])))
    if kind == "preference":
        if value not in (*keys, *PREFERENCE_EXTRA):
            raise _fail(f"{value!r} is not a response of this example; answer one of "
                        f"{', '.join((*keys, *PREFERENCE_EXTRA))}", where)
        return value
    if kind == "ranking":
        if not isinstance(value, list) or sorted(map(str, value)) != keys:
            raise _fail(f"rank every response once, best first: a permutation of {', '.join(keys)}", where)
        return value
    # spans
    if not isinstance(value, list) or len(value) > MAX_SPANS:
        raise _fail(f"a list of at most {MAX_SPANS} spans", where)
    length, spans = _text_length(row, field["source"]), []
    for i, span in enumerate(value):
        if (not isinstance(span, dict) or any(isinstance(span.get(k), bool) or not isinstance(span.get(k), int)
                                              for k in ("start", "end"))):
            raise _fail("a span is {start, end, label} with whole-number offsets", f"{where}[{i}]")
        if not 0 <= span["start"] < span["end"] <= length:
            raise _fail(f"the span {span['start']}–{span['end']} is outside the text (0–{length})", f"{where}[{i}]")
        if span.get("label") not in allowed:
            raise _fail(f"{span.get('label')!r} is not a label of '{field['name']}'", f"{where}[{i}].label")
        spans.append({"start": span["start"], "end": span["end"], "label": span["label"]})
    return sorted(spans, key=lambda s: (s["start"], s["end"], s["label"]))


def agreement_kind(field: dict) -> str | None:
    """How agreement is measured on a field: nominal, ordinal, or not at all (free text, spans)."""
    if field["type"] in ("single_label", "preference"):
        return "nominal"
    if field["type"] == "rating":
        return "ordinal"
    if field["type"] == "multi_label":
        return "nominal"  # on the label set as one value
    return None
