"""Automatic scores of an output against a reference: exact match and ROUGE-L.

Plain Python, no Django. Both compare normalised text, so case and spacing do not count:

- tokens: lower-cased words (runs of letters, digits and underscores), punctuation and
  whitespace dropped: "Paris, France." -> ["paris", "france"]. On ASCII text this is what the
  reference implementation (Google's rouge-score, no stemming) counts; unlike it, words in other
  scripts are kept rather than dropped.
- exact match: 1.0 when the outputs' word tokens (punctuation dropped) are equal, else 0.0,
  so "Paris." matches "paris" but "Paris, France" does not match "Paris".
- ROUGE-L (Lin, 2004): the longest common subsequence of the two token lists gives
  precision LCS/len(output) and recall LCS/len(reference); the score is their F1 (beta = 1).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TOKENS = 4000  # bound the quadratic LCS: longer texts are scored on their first MAX_TOKENS tokens


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())[:MAX_TOKENS]


def exact_match(output: str, reference: str) -> float:
    return 1.0 if _WORD.findall(output.lower()) == _WORD.findall(reference.lower()) else 0.0


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence (dynamic programming, two rows)."""
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(output: str, reference: str) -> float:
    """ROUGE-L F1 of `output` against `reference`, from 0 to 1 (1.0 for two empty texts)."""
    out, ref = tokens(output), tokens(reference)
    if not out and not ref:
        return 1.0
    if not out or not ref:
        return 0.0
    lcs = lcs_length(out, ref)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(out), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


def score_output(output: str, reference: str | None) -> dict:
    """The scores of one output: {} without a reference."""
    if reference is None:
        return {}
    return {"exact_match": exact_match(output, reference), "rouge_l": round(rouge_l(output, reference), 6)}
