"""Column mappings, canonical rows and hashes."""

from __future__ import annotations

import hashlib
import json

import pytest

from workers.ingest import (
    ROLES,
    ColumnMapping,
    IngestError,
    VersionHasher,
    canonical_json,
    canonical_row,
    canonical_split,
    row_hash,
)


def test_roles_are_the_documented_ones():
    assert ROLES == ("id", "prompt", "response", "messages", "label", "reference", "split")


def test_a_mapping_refuses_unknown_roles_and_roles_given_twice():
    with pytest.raises(IngestError) as info:
        ColumnMapping({"q": "prompt", "x": "question"})
    assert info.value.column == "x"
    assert str(info.value).startswith("column 'x': unknown role 'question'")
    with pytest.raises(IngestError) as info:
        ColumnMapping({"q": "prompt", "q2": "prompt"})
    assert str(info.value) == "column 'q2': the role 'prompt' is given to two columns, 'q' and 'q2'"


def test_a_mapping_is_immutable_and_checks_columns():
    roles = {"q": "prompt"}
    mapping = ColumnMapping(roles)
    roles["a"] = "response"
    assert mapping.roles == {"q": "prompt"}
    with pytest.raises(AttributeError):
        mapping.roles = {}  # type: ignore[misc]
    mapping.check_columns(["q", "other"])
    with pytest.raises(IngestError, match="not in the file") as info:
        mapping.check_columns(["other"])
    assert info.value.column == "q"
    with pytest.raises(IngestError, match="map a column to 'prompt' or to 'messages'"):
        ColumnMapping({"a": "response"}).check_columns(["a"])


def test_canonical_row_has_exactly_the_documented_keys():
    row = canonical_row({"q": "hi", "extra": 1}, ColumnMapping({"q": "prompt"}), 1)
    assert row == {
        "ext_id": None, "prompt": "hi", "response": None, "messages": None, "label": None, "reference": None,
        "metadata": {"extra": "1"},
    }


def test_text_roles_become_strings_as_json_writes_them():
    mapping = ColumnMapping({"i": "id", "p": "prompt", "l": "label", "r": "reference", "a": "response"})
    row = canonical_row({"i": 7, "p": "x", "l": True, "r": 0.1, "a": None}, mapping, 1)
    assert (row["ext_id"], row["label"], row["reference"], row["response"]) == ("7", "true", "0.1", None)
    csv_row = canonical_row({"i": "7", "p": "x", "l": "true", "r": "0.1", "a": ""}, mapping, 1)
    assert row_hash(row) == row_hash(csv_row)


def test_metadata_scalars_are_strings_and_missing_values_are_left_out():
    mapping = ColumnMapping({"p": "prompt"})
    nested = {"k": [1, "é"]}
    typed = canonical_row(
        {"p": "x", "n": 3, "f": 2.5, "b": False, "none": None, "empty": "", "nested": nested}, mapping, 1
    )
    assert typed["metadata"] == {"n": "3", "f": "2.5", "b": "false", "nested": {"k": [1, "é"]}}
    from_csv = canonical_row(
        {"p": "x", "n": "3", "f": "2.5", "b": "false", "empty": "", "none": "", "nested": nested}, mapping, 1
    )
    assert canonical_json(typed) == canonical_json(from_csv)
    sparse = canonical_row({"p": "x", "n": 3, "f": 2.5, "b": False, "nested": {"k": [1, "é"]}}, mapping, 1)
    assert row_hash(sparse) == row_hash(typed)


def test_text_is_kept_as_is_except_newlines_and_nfc():
    mapping = ColumnMapping({"p": "prompt"})
    text = "  <a href='javascript:alert(1)'>x</a> &amp; \r\nnext\rline  "
    row = canonical_row({"p": text, "m": "e\u0301"}, mapping, 1)
    assert row["prompt"] == "  <a href='javascript:alert(1)'>x</a> &amp; \nnext\nline  "
    assert row["metadata"] == {"m": "\u00e9"}


def test_nul_characters_and_lone_surrogates_are_refused():
    mapping = ColumnMapping({"p": "prompt"})
    with pytest.raises(IngestError) as info:
        canonical_row({"p": "a\x00b"}, mapping, 4)
    assert str(info.value) == "line 4, column 'p': the text contains a NUL character"
    with pytest.raises(IngestError, match="unpaired surrogate") as info:
        canonical_row(json.loads('{"p": "x", "meta": "\\ud800"}'), mapping, 5)
    assert (info.value.line, info.value.column) == (5, "meta")


def test_a_row_needs_a_prompt_or_messages():
    mapping = ColumnMapping({"q": "prompt", "a": "response"})
    with pytest.raises(IngestError) as info:
        canonical_row({"q": "", "a": "x"}, mapping, 9)
    assert str(info.value) == "line 9, column 'q': the row has no prompt (or messages)"
    with pytest.raises(IngestError) as info:
        canonical_row({"a": "x"}, mapping, 10)
    assert (info.value.line, info.value.column) == (10, "q")
    with pytest.raises(IngestError, match="no column is mapped"):
        canonical_row({"a": "x"}, ColumnMapping({"a": "response"}), 11)
    row = canonical_row({"m": [{"role": "user", "content": "hi"}]}, ColumnMapping({"m": "messages", "q": "prompt"}), 1)
    assert (row["prompt"], row["messages"]) == (None, [{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ("not json", "the messages are not valid JSON"),
        ({"role": "user"}, "messages must be a list of {role, content} objects"),
        (["hi"], "message 1 is not an object with role and content"),
        (
            [{"role": "bot", "content": "x"}],
            "message 1 has role 'bot'; it must be one of system, user, assistant, tool",
        ),
        ([{"role": "user", "content": "x"}, {"role": "user", "content": 3}], "message 2 has no text content"),
        ([{"role": "user", "content": "x", "name": "n"}], "message 1 has keys other than role and content: name"),
    ],
)
def test_bad_messages_name_the_line_and_column(messages, message):
    mapping = ColumnMapping({"chat": "messages"})
    with pytest.raises(IngestError) as info:
        canonical_row({"chat": messages}, mapping, 3)
    assert (info.value.line, info.value.column) == (3, "chat")
    assert info.value.message.startswith(message)


def test_messages_from_a_csv_string_equal_messages_from_json():
    mapping = ColumnMapping({"chat": "messages"})
    messages = [{"role": "user", "content": "a\r\nb"}, {"role": "assistant", "content": "c", "tool_calls": None}]
    from_json = canonical_row({"chat": messages}, mapping, 1)
    from_csv = canonical_row({"chat": json.dumps(messages)}, mapping, 1)
    assert from_json == from_csv
    assert from_json["messages"] == [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "c"}]


def test_lists_in_text_roles_are_refused():
    with pytest.raises(IngestError, match="the value is a list, not text") as info:
        canonical_row({"p": ["a"]}, ColumnMapping({"p": "prompt"}), 2)
    assert info.value.column == "p"


def test_canonical_json_is_sorted_compact_utf8():
    row = {"b": "é", "a": [1, {"d": None, "c": "<"}]}
    assert canonical_json(row) == '{"a":[1,{"c":"<","d":null}],"b":"é"}'.encode()
    assert row_hash(row) == hashlib.sha256(canonical_json(row)).hexdigest()


def _random_text(rng) -> str:
    alphabet = "ab Z09\"\\/\n\t\r\x01\x1f\x7f<>&é中🙂\u2028\u2029'"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def test_canonical_json_of_canonical_rows_is_the_json_encoders_own_output_byte_for_byte():
    # canonical_json writes canonical rows key by key; stored row and version hashes depend on
    # it giving exactly what json's sorted, compact, UTF-8 encoding gives, for any value.
    import random

    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    rng = random.Random(11)
    values = [None, lambda: _random_text(rng), lambda: [{"role": "user", "content": _random_text(rng)}],
              lambda: {_random_text(rng): _random_text(rng), "n": rng.random() * 1e20, "z": [1, None, True]},
              lambda: rng.randint(-5, 5), lambda: 0.1 + rng.random(), lambda: {}, lambda: []]
    keys = ("ext_id", "prompt", "response", "messages", "label", "reference", "metadata")
    for _ in range(3000):
        row = {key: (lambda pick: pick() if callable(pick) else pick)(rng.choice(values)) for key in keys}
        assert canonical_json(row) == encoder.encode(row).encode(), row
    odd = {"prompt": "a", "response": None, "ext_id": None, "label": None, "reference": None, "messages": None,
           "other": "x"}  # seven keys, not the canonical ones
    assert canonical_json(odd) == encoder.encode(odd).encode()
    with pytest.raises(ValueError):
        canonical_json({**dict.fromkeys(keys), "metadata": {"x": float("nan")}})


def test_version_hash_is_the_hash_of_row_hashes_in_order():
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    hasher = VersionHasher()
    digests = [hasher.update(row) for row in rows]
    expected = hashlib.sha256(b"".join(bytes.fromhex(d) for d in digests)).hexdigest()
    assert hasher.hexdigest() == expected
    assert hasher.count == 2
    again = VersionHasher()
    for digest in digests:
        again.update_row_hash(digest)
    assert again.hexdigest() == expected
    reversed_order = VersionHasher()
    for row in reversed(rows):
        reversed_order.update(row)
    assert reversed_order.hexdigest() != expected
    assert VersionHasher().hexdigest() == hashlib.sha256(b"").hexdigest()


def test_a_split_is_part_of_the_version_hash_but_not_of_the_row_hash():
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    unsplit, split, other_split = VersionHasher(), VersionHasher(), VersionHasher()
    plain = [unsplit.update(row) for row in rows]
    assert [split.update(row, name) for row, name in zip(rows, ["train", "test"])] == plain  # rows keep their hash
    for row, name in zip(rows, ["test", "train"]):
        other_split.update(row, name)
    assert len({unsplit.hexdigest(), split.hexdigest(), other_split.hexdigest()}) == 3
    # A version without splits hashes as it always did: sha256 over its row digests.
    assert unsplit.hexdigest() == hashlib.sha256(b"".join(bytes.fromhex(d) for d in plain)).hexdigest()
    again = VersionHasher()  # from the stored row hashes and splits, as a split job does
    for digest, name in zip(plain, ["train", "test"]):
        again.update_row_hash(digest, name)
    assert again.hexdigest() == split.hexdigest()


def test_a_column_mapped_to_split_names_the_rows_split_and_is_no_metadata():
    mapping = ColumnMapping({"q": "prompt", "part": "split"})
    record = {"q": "hi", "part": "validation", "lang": "en"}
    assert canonical_row(record, mapping, 1)["metadata"] == {"lang": "en"}
    assert canonical_row(record, mapping, 1) == canonical_row({"q": "hi", "lang": "en"}, ColumnMapping({"q": "prompt"}), 1)
    assert canonical_split(record, mapping, 1) == "validation"
    assert canonical_split({"q": "hi", "part": ""}, mapping, 1) == ""  # an empty cell: no split
    assert canonical_split(record, ColumnMapping({"q": "prompt"}), 1) == ""  # no split column


@pytest.mark.parametrize("value, complaint", [
    ("train set", "is not a split name"),
    ("x" * 17, "is not a split name"),
    (["train"], "is a list, not text"),
])
def test_a_bad_split_name_is_refused_naming_the_line_and_column(value, complaint):
    with pytest.raises(IngestError) as info:
        canonical_split({"q": "hi", "part": value}, ColumnMapping({"q": "prompt", "part": "split"}), 7)
    assert (info.value.line, info.value.column) == (7, "part") and complaint in str(info.value)


def test_ingest_errors_say_where_and_survive_pickling():
    import pickle

    from workers.ingest import IngestError

    error = IngestError("Expecting ',' delimiter", line=12, column=7)
    assert str(error) == "line 12, column 7: Expecting ',' delimiter"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.message, copy.line, copy.column, str(copy)) == (error.message, 12, 7, str(error))
    assert error.as_dict() == {"message": "Expecting ',' delimiter", "line": 12, "column": 7, "text": str(error)}
    assert str(IngestError("the file is empty")) == "the file is empty"
    assert str(IngestError("bad", column="prompt")) == "column 'prompt': bad"
