"""Word diffs of two texts, cut into hunks around each change (a few words of context each side),
so a change deep inside a long text is shown where it is instead of after a cut-off."""

import difflib
import re
from dataclasses import dataclass, field

# Words, runs of spaces, and single other characters: a change is shown to the word.
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
CONTEXT_TOKENS = 12  # about six words each side of a change
# Above this many token pairs in the part that differs, matching inside it costs too much for a
# page: the part is shown as replaced whole (its common start and end are still found).
MAX_MATCHED_PAIRS = 4_000_000


@dataclass
class Hunk:
    """One change with its context: parts are (op, text), op "same", "del" or "ins"; cut_before
    and cut_after say whether text of the field is left out on that side."""

    parts: list[tuple[str, str]] = field(default_factory=list)
    cut_before: bool = False
    cut_after: bool = False


def _opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    middle_a, middle_b = a[start:len(a) - end], b[start:len(b) - end]
    codes = [("equal", 0, start, 0, start)] if start else []
    if len(middle_a) * len(middle_b) <= MAX_MATCHED_PAIRS:
        matcher = difflib.SequenceMatcher(None, middle_a, middle_b, autojunk=False)
        codes += [(op, i1 + start, i2 + start, j1 + start, j2 + start) for op, i1, i2, j1, j2 in matcher.get_opcodes()]
    elif middle_a or middle_b:
        codes.append(("replace", start, len(a) - end, start, len(b) - end))
    if end:
        codes.append(("equal", len(a) - end, len(a), len(b) - end, len(b)))
    return _coalesced(codes, a)


def _coalesced(codes: list[tuple[str, int, int, int, int]], a: list[str]) -> list[tuple[str, int, int, int, int]]:
    """Changes separated only by spaces read as one change: "<del>a b</del><ins>c d</ins>", not
    four pieces around a kept space."""
    merged: list[tuple[str, int, int, int, int]] = []
    for index, (op, i1, i2, j1, j2) in enumerate(codes):
        between_changes = 0 < index < len(codes) - 1 and all(token.isspace() for token in a[i1:i2])
        if op == "equal" and not between_changes:
            merged.append((op, i1, i2, j1, j2))
        elif merged and merged[-1][0] != "equal":
            merged[-1] = ("replace", merged[-1][1], i2, merged[-1][3], j2)
        else:
            merged.append(("replace", i1, i2, j1, j2))
    return merged


def word_diff(before: str | None, after: str | None, context: int = CONTEXT_TOKENS) -> list[Hunk]:
    """The hunks that turn `before` into `after` (None is empty text); [] when they are equal."""
    a, b = _TOKEN.findall(before or ""), _TOKEN.findall(after or "")
    codes = _opcodes(a, b)
    hunks: list[Hunk] = []
    hunk: Hunk | None = None
    for index, (op, i1, i2, j1, j2) in enumerate(codes):
        if op != "equal":
            if hunk is None:
                hunk = Hunk(cut_before=False)
                hunks.append(hunk)
            if i2 > i1:
                hunk.parts.append(("del", "".join(a[i1:i2])))
            if j2 > j1:
                hunk.parts.append(("ins", "".join(b[j1:j2])))
            continue
        first, last = index == 0, index == len(codes) - 1
        if hunk is not None and (last or i2 - i1 > 2 * context):  # close the open hunk with some context
            hunk.parts.append(("same", "".join(a[i1:min(i2, i1 + context)])))
            hunk.cut_after = i2 > i1 + context
            hunk = None
            if last:
                continue
        elif hunk is not None:  # a short stretch between two changes stays whole
            hunk.parts.append(("same", "".join(a[i1:i2])))
            continue
        if not last:  # the context before the next change opens a new hunk
            lead = max(i1, i2 - context)
            hunk = Hunk(parts=[("same", "".join(a[lead:i2]))], cut_before=lead > 0 or not first)
            hunks.append(hunk)
    return hunks
