"""Deterministic, seeded train/validation/test splits, stratified by label when asked.

Each row gets a sort key from (seed, row hash, position): the same version and seed always
give the same split, and a row keeps its split when unrelated rows change. Within each
stratum (a label, or the whole version) rows are sorted by that key and cut by the ratios,
with the largest-remainder rule so the counts add up exactly.
"""

import hashlib
from collections import defaultdict
from collections.abc import Iterable

SPLIT_NAMES = ("train", "validation", "test")


def check_ratios(ratios: dict[str, float]) -> dict[str, float]:
    """Validate {split name: ratio}; ratios are non-negative and sum to 1 (within 1e-6)."""
    if not isinstance(ratios, dict) or not ratios:
        raise ValueError("ratios are an object of split name → fraction")
    unknown = set(ratios) - set(SPLIT_NAMES)
    if unknown:
        raise ValueError(f"unknown split name(s): {', '.join(sorted(unknown))}; use {', '.join(SPLIT_NAMES)}")
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 for v in ratios.values()):
        raise ValueError("each ratio is a number between 0 and 1")
    if abs(sum(ratios.values()) - 1) > 1e-6:
        raise ValueError(f"the ratios add up to {sum(ratios.values()):g}, not 1")
    return {name: float(ratios[name]) for name in SPLIT_NAMES if ratios.get(name)}


def _counts(n: int, ratios: dict[str, float]) -> dict[str, int]:
    exact = {name: n * ratio for name, ratio in ratios.items()}
    counts = {name: int(value) for name, value in exact.items()}
    leftover = n - sum(counts.values())
    for name in sorted(exact, key=lambda k: (exact[k] - counts[k], -list(ratios).index(k)), reverse=True)[:leftover]:
        counts[name] += 1
    return counts


def sort_key(seed: int, row_hash: str, position: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{row_hash}:{position}".encode(), digest_size=8).digest(), "big")


def assign_splits(rows: Iterable[tuple[int, str | None, str]], ratios: dict[str, float], *, seed: int,
                  stratify: bool) -> dict[int, str]:
    """rows: (position, label, row_hash). Returns {position: split name}."""
    ratios = check_ratios(ratios)
    strata: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
    for position, label, row_hash in rows:
        strata[label if stratify else None].append((sort_key(seed, row_hash, position), position))
    assignment: dict[int, str] = {}
    for members in strata.values():
        members.sort()
        start = 0
        for name, count in _counts(len(members), ratios).items():
            for _, position in members[start:start + count]:
                assignment[position] = name
            start += count
    return assignment
