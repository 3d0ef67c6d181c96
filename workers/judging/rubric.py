"""A judge's rubric, the messages a judge model is sent, and the strict reading of its answer.

A rubric is pointwise (each response scored on named criteria, 1–5 or pass/fail, each with a
reason) or pairwise (which of two responses is better: A, B or tie, with a reason). The judge
is told the exact JSON schema of its answer; `parse_answer` accepts the whole answer as one
JSON object valid against that schema, or nothing: a near miss is counted as unparseable,
never guessed at (no fences stripped, no first-brace search).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

POINTWISE, PAIRWISE = "pointwise", "pairwise"
KINDS = (POINTWISE, PAIRWISE)
SCALE_1_5, PASS_FAIL = "1-5", "pass_fail"
SCALES = (SCALE_1_5, PASS_FAIL)
WINNERS = ("A", "B", "tie")
MAX_CRITERIA = 10
MAX_DESCRIPTION = 1000
MAX_INSTRUCTIONS = 4000
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")  # a JSON key the judge repeats back: plain and short


class RubricError(ValueError):
    """The rubric as given cannot be used; `field` names what is wrong."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class Criterion:
    name: str  # lower-case identifier, the key of its score in the judge's answer
    description: str = ""  # what the judge looks for
    scale: str = SCALE_1_5  # "1-5" or "pass_fail" (pointwise; pairwise criteria are what to weigh)


@dataclass(frozen=True)
class Rubric:
    kind: str  # "pointwise" or "pairwise"
    criteria: tuple[Criterion, ...]
    instructions: str = ""  # anything else the judge is told, before the criteria

    def as_dict(self) -> dict:
        return {"kind": self.kind, "instructions": self.instructions,
                "criteria": [asdict(c) for c in self.criteria]}


def check_rubric(data) -> Rubric:
    """A Rubric from its JSON form ({kind, instructions, criteria: [{name, description, scale}]}).
    Raises RubricError naming the field: an unknown kind, no criteria, a bad or repeated name, an
    unknown scale."""
    if not isinstance(data, dict):
        raise RubricError("The rubric is an object {kind, criteria, instructions}.", "rubric")
    kind = data.get("kind")
    if kind not in KINDS:
        raise RubricError(f"kind is one of {', '.join(KINDS)}.", "kind")
    instructions = data.get("instructions") or ""
    if not isinstance(instructions, str) or len(instructions) > MAX_INSTRUCTIONS:
        raise RubricError(f"instructions is text of at most {MAX_INSTRUCTIONS} characters.", "instructions")
    raw = data.get("criteria")
    if not isinstance(raw, list) or not raw:
        raise RubricError("A rubric needs at least one criterion.", "criteria")
    if len(raw) > MAX_CRITERIA:
        raise RubricError(f"A rubric has at most {MAX_CRITERIA} criteria.", "criteria")
    criteria, seen = [], set()
    for i, item in enumerate(raw):
        field = f"criteria[{i}]"
        if not isinstance(item, dict):
            raise RubricError("Each criterion is an object {name, description, scale}.", field)
        name = item.get("name")
        if not isinstance(name, str) or not NAME.match(name.strip()):
            raise RubricError("A criterion's name is 1-40 lower-case letters, digits or _, starting with a letter.",
                              f"{field}.name")
        name = name.strip()
        if name in seen:
            raise RubricError(f"The criterion {name!r} is named twice.", f"{field}.name")
        seen.add(name)
        description = item.get("description") or ""
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise RubricError(f"A description is text of at most {MAX_DESCRIPTION} characters.",
                              f"{field}.description")
        scale = item.get("scale") or SCALE_1_5
        if scale not in SCALES:
            raise RubricError(f"scale is one of {', '.join(SCALES)}.", f"{field}.scale")
        criteria.append(Criterion(name=name, description=description.strip(), scale=scale))
    return Rubric(kind=kind, criteria=tuple(criteria), instructions=instructions.strip())


def answer_schema(rubric: Rubric) -> dict:
    """The JSON schema of a judge's answer under this rubric (sent to the judge, and checked)."""
    if rubric.kind == PAIRWISE:
        return {"type": "object", "additionalProperties": False, "required": ["winner", "reason"],
                "properties": {"winner": {"enum": list(WINNERS)}, "reason": {"type": "string"}}}
    properties = {}
    for c in rubric.criteria:
        score = ({"type": "integer", "minimum": 1, "maximum": 5} if c.scale == SCALE_1_5
                 else {"enum": ["pass", "fail"]})
        properties[c.name] = {"type": "object", "additionalProperties": False, "required": ["score", "reason"],
                              "properties": {"score": score, "reason": {"type": "string"}}}
    return {"type": "object", "additionalProperties": False, "required": [c.name for c in rubric.criteria],
            "properties": properties}


def _criteria_text(rubric: Rubric) -> str:
    lines = []
    for c in rubric.criteria:
        scale = "" if rubric.kind == PAIRWISE else (" (score 1 to 5, 5 best)" if c.scale == SCALE_1_5
                                                     else " (pass or fail)")
        lines.append(f"- {c.name}{scale}: {c.description}".rstrip(": "))
    return "\n".join(lines)


def judge_messages(rubric: Rubric, prompt: str, *, response: str | None = None, a: str | None = None,
                   b: str | None = None) -> list[dict]:
    """The chat messages for one judgement: `response` for a pointwise rubric, `a` and `b` (in
    the order shown) for a pairwise one."""
    task = ("Judge the response to the prompt on each criterion." if rubric.kind == POINTWISE else
            "Decide which response answers the prompt better, weighing the criteria: A, B, or tie.")
    system = "\n\n".join(part for part in (
        "You are a careful evaluator of AI assistant responses.", rubric.instructions, task,
        "Criteria:\n" + _criteria_text(rubric),
        "Answer with one JSON object and nothing else, valid against this JSON schema:\n"
        + json.dumps(answer_schema(rubric), sort_keys=True)) if part)
    if rubric.kind == POINTWISE:
        user = f"[Prompt]\n{prompt}\n\n[Response]\n{response}"
    else:
        user = f"[Prompt]\n{prompt}\n\n[Response A]\n{a}\n\n[Response B]\n{b}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_answer(text: str, rubric: Rubric) -> tuple[dict | None, str]:
    """(the answer, "") when `text` is exactly one JSON object valid against the rubric's schema
    (whitespace around it allowed); (None, why) otherwise."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        return None, f"not JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else exc}"[:300]
    where, why = check_answer(value, rubric)
    if why:
        return None, f"{where}: {why}"[:300]
    return value, ""


def check_answer(value, rubric: Rubric) -> tuple[str, str]:
    """("", "") when `value` is valid against the rubric's answer schema; else (where, why): the
    path of the first error ("helpfulness/score", or "answer" for the whole) and its message."""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(answer_schema(rubric)).iter_errors(value), key=lambda e: list(e.path))
    if not errors:
        return "", ""
    return "/".join(str(p) for p in errors[0].absolute_path) or "answer", errors[0].message
