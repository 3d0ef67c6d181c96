"""Statistics of a version, gathered in one pass while its rows stream in.

Kept with the version, so the stats page never scans rows. Lengths are in characters (token
lengths need a tokenizer: TokenLengths, fed by a worker job).
"""

from bisect import bisect_right

# Character-length histogram bin edges; the last bin is open-ended.
LENGTH_BINS = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
FIELDS = ("prompt", "response", "messages", "label", "reference")
MAX_LABELS = 50  # labels kept in a version's stats, most frequent first
MAX_EXAMPLES = 10  # positions of exact duplicates kept as examples


class VersionStats:
    """What one pass over a version's rows counts in fixed memory, whatever the size: rows,
    empty or missing fields and length histograms. Labels and exact duplicates need memory that
    grows with the rows, so the database counts those once the rows are stored
    (apps.datasets.bulk.stored_tallies)."""

    def __init__(self) -> None:
        self.rows = 0
        self.missing = dict.fromkeys(FIELDS, 0)
        self.lengths = {name: [0] * len(LENGTH_BINS) for name in ("prompt", "response", "total")}

    def add(self, row: dict) -> None:
        # Called once per row of every import: kept to plain local operations.
        self.rows += 1
        get = row.get
        for field in FIELDS:
            if not get(field):  # None, "" or [] (canonical values are text, lists or None)
                self.missing[field] += 1
        messages = get("messages")
        prompt = sum(len(turn.get("content") or "") for turn in messages) if messages else len(get("prompt") or "")
        response = len(get("response") or "")
        lengths = self.lengths
        lengths["prompt"][bisect_right(LENGTH_BINS, prompt) - 1] += 1
        lengths["response"][bisect_right(LENGTH_BINS, response) - 1] += 1
        lengths["total"][bisect_right(LENGTH_BINS, prompt + response) - 1] += 1

    def merge(self, other: "VersionStats") -> None:
        """Add the counts of another part of the same version."""
        self.rows += other.rows
        for field in FIELDS:
            self.missing[field] += other.missing[field]
        for name, counts in other.lengths.items():
            self.lengths[name] = [a + b for a, b in zip(self.lengths[name], counts, strict=True)]

    def as_dict(self) -> dict:
        return {
            "rows": self.rows,
            "missing": dict(self.missing),
            "length_bins": list(LENGTH_BINS),
            "lengths": self.lengths,
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
