"""Annotation field types: one class per type, registered by name.

Each type says, for its fields, how a schema entry is checked and normalised, how an answer is
checked, how agreement is measured, how a resolved answer goes into an exported row, and how a
reviewer reads an answer in words. The schema, quality, export, suggestion and page code ask
the registry (`field_type(field)`) instead of branching on the type's name. A new type is one
class here (decorated with `@register`) and one renderer in static/js/annotation/fields/.

Types:
- single_label / multi_label: "labels": [{"value", "hotkey"?, "description"?}]; a label without a
  hotkey gets the next free one of LABEL_KEYS (1-9, then letters the page does not keep, then those
  letters with Shift, then two-key chords such as "0 then 1");
- text: free text ("max_length", "prefill": "response" | "suggestion" | "" — what the editor starts
  with; the page shows the diff against it);
- rating: one named criterion, an integer in ["min", "max"] with an optional description per value;
- preference: pick among the example's candidate responses — "candidates": row paths (e.g.
  ["response", "metadata.response_b"]); the answer is "A", "B", ... (A = first candidate),
  "tie" or "both_bad";
- ranking: the candidates ordered best first (a permutation of "A", "B", ...);
- spans: highlighted character ranges of the example's "source" text ("prompt" or "response"),
  each with one of "labels".
Nothing here touches the database.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, ClassVar

from apps.core.errors import Invalid

MAX_LABELS = 50
MAX_TEXT = 20_000  # characters: a long ideal response fits; a pasted book does not
MAX_SPANS = 200
PREFERENCE_EXTRA = ("tie", "both_bad")
PREFERENCE_WORDS = {"tie": "tie", "both_bad": "both bad"}
# Keys the annotation page keeps for itself: s skips, ? shows the shortcuts, a-h pick a
# preference's responses, t and x are tie and both bad.
RESERVED_KEYS = frozenset("s?abcdefghtx")
_FREE_LETTERS = [c for c in string.ascii_lowercase if c not in RESERVED_KEYS]
# Single keys, handed out in this order to labels that name none (39).
HOTKEYS = tuple("123456789") + tuple(_FREE_LETTERS) + tuple(c.upper() for c in _FREE_LETTERS)
# Past them, two-key chords: one of these, then a single key ("0 then 1"). A prefix is never a
# single key itself, so a chord cannot shadow one.
CHORD_PREFIXES = tuple("0-=;,./")
CHORDS = tuple(prefix + key for prefix in CHORD_PREFIXES for key in HOTKEYS)
# Every label of a form gets a key: a form holds at most this many labels (312) in all.
LABEL_KEYS = HOTKEYS + CHORDS
CANDIDATE_PATH = re.compile(r"^(prompt|response|reference|metadata\.[A-Za-z0-9_\-]{1,64})$")


def fail(message: str, field: str) -> Invalid:
    return Invalid(message, field=field)


def candidate_keys(count: int) -> list[str]:
    return list(string.ascii_uppercase[:count])


def row_value(row: dict, path: str) -> Any:
    """A row's value at a candidate path ("response", "metadata.response_b")."""
    if path.startswith("metadata."):
        return (row.get("metadata") or {}).get(path.split(".", 1)[1])
    return row.get(path)


def short_text(value: Any, where: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail("must be text", where)
    if len(value) > limit:
        raise fail(f"at most {limit} characters", where)
    return value


def whole_number(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(f"must be a whole number from {low} to {high}", where)
    return value


@dataclass
class FormKeys:
    """The hotkeys of one form while its fields are checked: those labels name anywhere in the
    form (handed-out keys go around them) and those taken so far (unique across fields)."""

    named: set = dataclass_field(default_factory=set)
    taken: set = dataclass_field(default_factory=set)


class FieldType:
    """One kind of field. Subclasses set `name` and override what differs; the defaults are
    those of a field agreement is not measured on, whose answer is kept as metadata."""

    name: ClassVar[str]
    # Whether a field of this type must be answered unless its schema entry says otherwise.
    required_by_default: ClassVar[bool] = True
    # "nominal", "ordinal", or None: agreement is not measured on it (free text, spans).
    agreement_level: ClassVar[str | None] = None
    # Whether the "preferences" export makes prompt/chosen/rejected rows from it.
    teaches_preferences: ClassVar[bool] = False

    def clean_spec(self, spec: dict, where: str, keys: FormKeys) -> dict:
        """The type's own keys of a schema entry, normalised. Raises Invalid naming `where.key`."""
        return {}

    def clean_answer(self, field: dict, value: Any, row: dict, where: str) -> Any:
        """A non-empty answer, normalised. `row` is the example (span offsets, candidates)."""
        raise NotImplementedError

    def agreement_domain(self, field: dict) -> list | None:
        """The ordered values of an ordinal field (None: the values answered)."""
        return None

    def candidate_paths(self, field: dict) -> list[str]:
        """The row paths of the responses the field compares (shown side by side)."""
        return []

    def in_words(self, field: dict, value: Any, example: dict) -> str:
        """The answer as a reviewer reads it."""
        return plain_words(value)

    def export_resolved(self, field: dict, value: Any, record: dict, *, row, fields: list[dict]) -> None:
        """Write the resolved answer into the exported row `record` (of the dataset row `row`)."""
        record[f"annotation.{field['name']}"] = value

    def preference_pairs(self, field: dict, answer: Any) -> list[tuple[str, str]]:
        """(chosen, rejected) candidate keys the answer teaches (when `teaches_preferences`)."""
        return []

    def fills_from_model_response(self, field: dict) -> bool:
        """Whether the suggestion model's response pre-fills it (it then needs a model)."""
        return False

    def suggestion_question(self, field: dict) -> str | None:
        """What the suggestion model is asked for this field (None: nothing)."""
        return None

    def suggestion_from_reply(self, field: dict, reply: str) -> Any:
        """The suggested answer in the model's reply to `suggestion_question` (None: none)."""
        return None

    # Whether the classifier that fills this type's fields predicts a list of classes (multi-label).
    multi_label_classes = False

    def classifier_labels(self, field: dict) -> list[str] | None:
        """The labels a classifier's classes must be to suggest this field's answer (None: a
        classifier does not fill fields of this type)."""
        return None

    def suggestion_from_classes(self, field: dict, probabilities: dict[str, float]) -> Any:
        """The answer a classifier's class probabilities suggest (when `classifier_labels`)."""
        return None


def plain_words(value: Any) -> str:
    return ", ".join(str(entry) for entry in value) if isinstance(value, list) else str(value)


FIELD_TYPES: dict[str, FieldType] = {}


def register(cls: type[FieldType]) -> type[FieldType]:
    """Class decorator: make the type known by its `name` to schemas, answers and exports."""
    if cls.name in FIELD_TYPES:
        raise ValueError(f"the field type {cls.name!r} is registered twice")
    FIELD_TYPES[cls.name] = cls()
    return cls


def field_type(field: dict) -> FieldType:
    """The type of a field of a normalised schema."""
    return FIELD_TYPES[field["type"]]


def labels_spec(labels: Any, where: str, keys: FormKeys, *, auto_hotkeys: bool) -> list[dict]:
    """Labels with their hotkeys; the form's hotkeys are unique across its fields (LABEL_KEYS given
    out in order where none is named, skipping those named anywhere in the form)."""
    if not isinstance(labels, list) or not labels:
        raise fail("labels is a non-empty list", f"{where}.labels")
    if len(labels) > MAX_LABELS:
        raise fail(f"at most {MAX_LABELS} labels", f"{where}.labels")
    result, values = [], set()
    for i, label in enumerate(labels):
        if isinstance(label, str):
            label = {"value": label}
        if not isinstance(label, dict) or not isinstance(label.get("value"), str) or not label["value"].strip():
            raise fail("each label has a non-empty text value", f"{where}.labels[{i}]")
        value = short_text(label["value"], f"{where}.labels[{i}].value", 100)
        if value in values:
            raise fail(f"the label '{value}' is listed twice", f"{where}.labels[{i}].value")
        values.add(value)
        hotkey = label.get("hotkey")
        if hotkey is None and auto_hotkeys:
            hotkey = next((key for key in LABEL_KEYS if key not in keys.taken and key not in keys.named), None)
            if hotkey is None:
                raise fail(f"every label gets a key: a form holds at most {len(LABEL_KEYS)} labels in all",
                           f"{where}.labels[{i}]")
        if hotkey is not None:
            if not valid_hotkey(hotkey):
                raise fail("a hotkey is one printable character, not one the page keeps (s ? a-h t x) nor a "
                           f"chord's first key ({' '.join(CHORD_PREFIXES)}), or such a first key and then one",
                           f"{where}.labels[{i}].hotkey")
            if hotkey in keys.taken:
                raise fail(f"the hotkey '{hotkey}' is used twice", f"{where}.labels[{i}].hotkey")
            keys.taken.add(hotkey)
        result.append({"value": value, "hotkey": hotkey,
                       "description": short_text(label.get("description", ""), f"{where}.labels[{i}].description",
                                                 300)})
    return result


def valid_hotkey(hotkey: Any) -> bool:
    """One key the page does not keep, or a chord: a prefix and then such a key."""
    def single(key: str) -> bool:
        return (key.lower() not in RESERVED_KEYS and key not in CHORD_PREFIXES and key.isprintable()
                and not key.isspace())

    if not isinstance(hotkey, str) or len(hotkey) not in (1, 2):
        return False
    if len(hotkey) == 2:
        return hotkey[0] in CHORD_PREFIXES and single(hotkey[1])
    return single(hotkey)


def label_values(field: dict) -> list[str]:
    return [label["value"] for label in field["labels"]]


def not_a_label(value: Any, field: dict, where: str) -> Invalid:
    return fail(f"{value!r} is not a label of '{field['name']}' ({', '.join(label_values(field))})", where)


@register
class SingleLabel(FieldType):
    name = "single_label"
    agreement_level = "nominal"

    def clean_spec(self, spec, where, keys):
        return {"labels": labels_spec(spec.get("labels"), where, keys, auto_hotkeys=True)}

    def clean_answer(self, field, value, row, where):
        if not isinstance(value, str) or value not in label_values(field):
            raise not_a_label(value, field, where)
        return value

    def export_resolved(self, field, value, record, *, row, fields):
        # The form's only single label is the row's label; with several, none of them is.
        if [f for f in fields if f["type"] == self.name] == [field]:
            record["label"] = value
        else:
            super().export_resolved(field, value, record, row=row, fields=fields)

    def suggestion_question(self, field):
        return f"Answer with one of: {', '.join(label_values(field))}."

    def suggestion_from_reply(self, field, reply):
        """The label the reply names first (case-insensitive): a reply that names none gives no
        suggestion rather than a guess."""
        text = reply.strip().lower()
        found = [(text.find(label.lower()), label) for label in label_values(field) if label.lower() in text]
        return min(found)[1] if found else None

    def classifier_labels(self, field):
        return label_values(field)

    def suggestion_from_classes(self, field, probabilities):
        return max(probabilities, key=probabilities.__getitem__)


@register
class MultiLabel(FieldType):
    name = "multi_label"
    agreement_level = "nominal"  # on the label set as one value
    multi_label_classes = True

    def clean_spec(self, spec, where, keys):
        return {"labels": labels_spec(spec.get("labels"), where, keys, auto_hotkeys=True)}

    def clean_answer(self, field, value, row, where):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail("a list of labels", where)
        allowed = label_values(field)
        bad = next((v for v in value if v not in allowed), None)
        if bad is not None:
            raise not_a_label(bad, field, where)
        return sorted(set(value), key=allowed.index)

    def classifier_labels(self, field):
        return label_values(field)

    def suggestion_from_classes(self, field, probabilities):
        """The classes a multi-label classifier puts above one half, in the field's order."""
        return [label for label in label_values(field) if probabilities.get(label, 0) > 0.5]


@register
class Text(FieldType):
    name = "text"
    required_by_default = False

    def clean_spec(self, spec, where, keys):
        prefill = spec.get("prefill", "")
        max_length = whole_number(spec.get("max_length", MAX_TEXT), f"{where}.max_length", 1, MAX_TEXT)
        if prefill not in ("", "response", "suggestion"):
            raise fail("prefill must be '', 'response' or 'suggestion'", f"{where}.prefill")
        return {"max_length": max_length, "prefill": prefill}

    def clean_answer(self, field, value, row, where):
        if not isinstance(value, str):
            raise fail("must be text", where)
        if len(value) > field["max_length"]:
            raise fail(f"at most {field['max_length']} characters (got {len(value)})", where)
        return value

    def export_resolved(self, field, value, record, *, row, fields):
        # A text that edits the response (or the model's draft of it) becomes the response.
        if field.get("prefill") in ("response", "suggestion"):
            record["original_response"] = row.response
            record["response"] = value
        else:
            super().export_resolved(field, value, record, row=row, fields=fields)

    def fills_from_model_response(self, field):
        return field.get("prefill") == "suggestion"


@register
class Rating(FieldType):
    name = "rating"
    agreement_level = "ordinal"

    def clean_spec(self, spec, where, keys):
        low = whole_number(spec.get("min", 1), f"{where}.min", 0, 100)
        high = whole_number(spec.get("max", 5), f"{where}.max", 1, 100)
        if high <= low:
            raise fail("max must be greater than min", f"{where}.max")
        scale = spec.get("scale", {})
        if not isinstance(scale, dict):
            raise fail("scale maps a value to its description", f"{where}.scale")
        return {"min": low, "max": high,
                "scale": {str(k): short_text(v, f"{where}.scale.{k}", 300) for k, v in scale.items()}}

    def clean_answer(self, field, value, row, where):
        if isinstance(value, bool) or not isinstance(value, int) or not field["min"] <= value <= field["max"]:
            raise fail(f"a whole number from {field['min']} to {field['max']}", where)
        return value

    def agreement_domain(self, field):
        return list(range(field["min"], field["max"] + 1))


class ComparesCandidates(FieldType):
    """A field over the example's candidate responses, keyed "A", "B", ... in order."""

    teaches_preferences = True

    def clean_spec(self, spec, where, keys):
        candidates = spec.get("candidates", ["response", "metadata.response_b"])
        if (not isinstance(candidates, list) or not 2 <= len(candidates) <= 8
                or not all(isinstance(c, str) and CANDIDATE_PATH.match(c) for c in candidates)):
            raise fail("candidates is a list of 2 to 8 row paths: prompt, response, reference or metadata.<key>",
                       f"{where}.candidates")
        return {"candidates": candidates}

    def candidate_paths(self, field):
        return field["candidates"]


@register
class Preference(ComparesCandidates):
    name = "preference"
    agreement_level = "nominal"

    def clean_answer(self, field, value, row, where):
        choices = (*candidate_keys(len(field["candidates"])), *PREFERENCE_EXTRA)
        if value not in choices:
            raise fail(f"{value!r} is not a response of this example; answer one of {', '.join(choices)}", where)
        return value

    def in_words(self, field, value, example):
        return PREFERENCE_WORDS.get(value, f"{value} is better")

    def preference_pairs(self, field, answer):
        keys = candidate_keys(len(field["candidates"]))
        if answer not in keys:
            return []  # a tie or both bad teaches no preference
        return [(answer, other) for other in keys if other != answer]


@register
class Ranking(ComparesCandidates):
    name = "ranking"

    def clean_answer(self, field, value, row, where):
        keys = candidate_keys(len(field["candidates"]))
        if not isinstance(value, list) or sorted(map(str, value)) != keys:
            raise fail(f"rank every response once, best first: a permutation of {', '.join(keys)}", where)
        return value

    def in_words(self, field, value, example):
        return " > ".join(value)

    def preference_pairs(self, field, answer):
        return [(answer[0], other) for other in answer[1:]]


@register
class Spans(FieldType):
    name = "spans"

    def clean_spec(self, spec, where, keys):
        labels = labels_spec(spec.get("labels"), where, keys, auto_hotkeys=False)
        source = spec.get("source", "response")
        if source not in ("prompt", "response"):
            raise fail("source must be 'prompt' or 'response'", f"{where}.source")
        return {"labels": labels, "source": source}

    def clean_answer(self, field, value, row, where):
        if not isinstance(value, list) or len(value) > MAX_SPANS:
            raise fail(f"a list of at most {MAX_SPANS} spans", where)
        text = row_value(row, field["source"])
        length, allowed, spans = len(text) if isinstance(text, str) else 0, label_values(field), []
        for i, span in enumerate(value):
            if (not isinstance(span, dict) or any(isinstance(span.get(k), bool) or not isinstance(span.get(k), int)
                                                  for k in ("start", "end"))):
                raise fail("a span is {start, end, label} with whole-number offsets", f"{where}[{i}]")
            if not 0 <= span["start"] < span["end"] <= length:
                raise fail(f"the span {span['start']}–{span['end']} is outside the text (0–{length})",
                           f"{where}[{i}]")
            if span.get("label") not in allowed:
                raise fail(f"{span.get('label')!r} is not a label of '{field['name']}'", f"{where}[{i}].label")
            spans.append({"start": span["start"], "end": span["end"], "label": span["label"]})
        return sorted(spans, key=lambda s: (s["start"], s["end"], s["label"]))

    def in_words(self, field, value, example):
        # Offsets count code points, as stored; each span is shown with the text it marks.
        text = row_value(example, field["source"])
        text = text if isinstance(text, str) else ""
        return "; ".join(f"{span['label']}: “{text[span['start']:span['end']]}”" for span in value)
