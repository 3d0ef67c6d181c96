"""Statistics of a version, gathered in one pass while its rows stream in.

Kept with the version, so the stats page never scans rows. Lengths are in characters (token
lengths need a tokenizer and come with the model registry). Memory: one 8-byte digest per
row for duplicate detection.
"""

import hashlib
from bisect import bisect_right
from collections import Counter

# Character-length histogram bin edges; the last bin is open-ended.
LENGTH_BINS = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
FIELDS = ("prompt", "response", "messages", "label", "reference")
MAX_LABELS = 50
MAX_EXAMPLES = 10


def _bin(length: int) -> int:
    return bisect_right(LENGTH_BINS, length) - 1


def _text_length(row: dict, field: str) -> int:
    if field == "prompt" and row.get("messages"):
        return sum(len(turn.get("content") or "") for turn in row["messages"])
    return len(row.get(field) or "")


def content_digest(row: dict) -> int:
    """Identity of a row's content (prompt, response, messages, label, reference), ignoring
    its id and metadata: two rows with the same digest are exact duplicates."""
    key = repr((row.get("prompt"), row.get("response"), row.get("messages"), row.get("label"),
                row.get("reference"))).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


class VersionStats:
    """One pass over a version's rows. With tally=False it keeps no per-row or per-label state
    (fixed memory whatever the size): labels and duplicates are then left to the caller, which
    counts them where the rows are stored (apps.datasets.bulk.stored_tallies)."""

    def __init__(self, tally: bool = True) -> None:
        self.tally = tally
        self.rows = 0
        self.labels: Counter[str] = Counter()
        self.missing: Counter[str] = Counter()
        self.lengths = {name: [0] * len(LENGTH_BINS) for name in ("prompt", "response", "total")}
        self.seen: set[int] = set()
        self.duplicates = 0
        self.duplicate_examples: list[int] = []

    def add(self, position: int, row: dict) -> None:
        self.rows += 1
        for field in FIELDS:
            if row.get(field) in (None, "", []):
                self.missing[field] += 1
        if self.tally and row.get("label") is not None:
            self.labels[row["label"]] += 1
        prompt, response = _text_length(row, "prompt"), _text_length(row, "response")
        self.lengths["prompt"][_bin(prompt)] += 1
        self.lengths["response"][_bin(response)] += 1
        self.lengths["total"][_bin(prompt + response)] += 1
        if not self.tally:
            return
        digest = content_digest(row)
        if digest in self.seen:
            self.duplicates += 1
            if len(self.duplicate_examples) < MAX_EXAMPLES:
                self.duplicate_examples.append(position)
        else:
            self.seen.add(digest)

    def as_dict(self) -> dict:
        labels = self.labels.most_common(MAX_LABELS)
        return {
            "rows": self.rows,
            "labels": dict(labels),
            "labels_distinct": len(self.labels),
            "missing": {field: self.missing[field] for field in FIELDS},
            "length_bins": list(LENGTH_BINS),
            "lengths": self.lengths,
            "duplicates": self.duplicates,
            "duplicate_examples": self.duplicate_examples,
        }


# Token-length histogram bin edges (tokens); the last bin is open-ended.
TOKEN_BINS = (0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class TokenLengths:
    """Histograms of prompt, response and total token counts, one row at a time."""

    def __init__(self) -> None:
        self.hist = {name: [0] * len(TOKEN_BINS) for name in ("prompt", "response", "total")}
        self.longest = {name: 0 for name in self.hist}
        self.rows = 0

    def add(self, prompt_tokens: int, response_tokens: int) -> None:
        self.rows += 1
        for name, count in (("prompt", prompt_tokens), ("response", response_tokens),
                            ("total", prompt_tokens + response_tokens)):
            index = max(i for i, edge in enumerate(TOKEN_BINS) if count >= edge)
            self.hist[name][index] += 1
            self.longest[name] = max(self.longest[name], count)

    def as_dict(self) -> dict:
        return {"bins": list(TOKEN_BINS), "histograms": self.hist, "longest": self.longest, "rows": self.rows}
