"""A sweep's search space and the config points it expands to (plain data; the service launches them).

    space = {"learning_rate": [1e-3, 1e-2], "lora_r": [4, 8]}                    # grid: every combination
    space = {"learning_rate": {"min": 1e-4, "max": 1e-2, "log": True},           # random: K draws, seeded
             "lora_r": [4, 8, 16]}

A grid takes lists of values; a random sample takes lists (a uniform choice) or ranges {"min", "max"}
("log": true draws a float range uniformly in log space; an integer option draws whole numbers between
its bounds). Every error is an Invalid naming its field (`space`, `space.<option>`, `max_jobs`, `seed`).
The values' ranges are TrainConfig's own, checked by the service on each point's whole config.
"""

from __future__ import annotations

import itertools
import math
import random

from apps.core.errors import Invalid

# The options a sweep may vary, and whether each is a whole number.
SWEEPABLE = {"learning_rate": False, "lora_r": True, "lora_alpha": True, "epochs": True, "batch_size": True}
GRID, RANDOM = "grid", "random"
DRAWS_PER_JOB = 50  # a random sample of a small discrete space gives up on new points after this many tries
SIGNIFICANT_DIGITS = 4  # a drawn float is rounded so its job's name and the table read well


def _number(option: str, value, field: str):
    whole = SWEEPABLE[option]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or math.isinf(value):
        raise Invalid(f"{field}: {value!r} is not a {'whole ' if whole else ''}number.", field=field)
    if whole:
        if isinstance(value, float) and not value.is_integer():
            raise Invalid(f"{field}: {value!r} is not a whole number.", field=field)
        return int(value)
    return float(value)


def checked_space(strategy: str, space) -> dict:
    """The space with its values checked and typed (lists without repeats). Raises Invalid."""
    if strategy not in (GRID, RANDOM):
        raise Invalid("strategy is grid or random.", field="strategy")
    if not isinstance(space, dict) or not space:
        raise Invalid("space: name at least one option to sweep, with its values "
                      f"({', '.join(SWEEPABLE)}).", field="space")
    checked = {}
    for option, values in space.items():
        field = f"space.{option}"
        if option not in SWEEPABLE:
            raise Invalid(f"{field}: not an option a sweep varies; sweep {', '.join(SWEEPABLE)}.", field=field)
        if isinstance(values, dict) and strategy == RANDOM:
            checked[option] = _checked_range(option, values, field)
            continue
        if not isinstance(values, list):
            what = "a list of values, or a range {\"min\", \"max\"}" if strategy == RANDOM else "a list of values"
            raise Invalid(f"{field}: give {what}.", field=field)
        if not values:
            raise Invalid(f"{field}: the list is empty; give at least one value.", field=field)
        checked[option] = list(dict.fromkeys(_number(option, value, field) for value in values))
    return checked


def _checked_range(option: str, spec: dict, field: str) -> dict:
    unknown = set(spec) - {"min", "max", "log"}
    if unknown:
        raise Invalid(f"{field}: a range has min, max and log, not {', '.join(sorted(map(str, unknown)))}.",
                      field=field)
    if "min" not in spec or "max" not in spec:
        raise Invalid(f"{field}: a range needs min and max.", field=field)
    low, high = _number(option, spec["min"], f"{field}.min"), _number(option, spec["max"], f"{field}.max")
    if low > high:
        raise Invalid(f"{field}: min {low:g} is above max {high:g}.", field=field)
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise Invalid(f"{field}.log: true or false.", field=f"{field}.log")
    if log and low <= 0:
        raise Invalid(f"{field}: a log range needs min above 0.", field=field)
    return {"min": low, "max": high, "log": log}


def grid_size(space: dict) -> int:
    return math.prod(len(values) for values in space.values())


def points(strategy: str, space: dict, *, max_jobs: int, seed: int) -> list[dict]:
    """The config points of a checked space: every combination of a grid, in the order the space lists
    options and values (Invalid naming max_jobs when there are more than K); K distinct draws of a
    random sample from random.Random(seed) (fewer when the space has fewer distinct points)."""
    if strategy == GRID:
        size = grid_size(space)
        if size > max_jobs:
            raise Invalid(f"max_jobs: the grid has {size} combinations, more than max_jobs {max_jobs}; raise "
                          "max_jobs or sample the space at random.", field="max_jobs")
        options = list(space)
        return [dict(zip(options, combination, strict=True)) for combination in itertools.product(*space.values())]
    rng = random.Random(seed)
    drawn: list[dict] = []
    seen: set[tuple] = set()
    for _ in range(max_jobs * DRAWS_PER_JOB):
        point = {option: _draw(rng, option, values) for option, values in space.items()}
        key = tuple(point.values())
        if key not in seen:
            seen.add(key)
            drawn.append(point)
            if len(drawn) == max_jobs:
                break
    return drawn


def _draw(rng: random.Random, option: str, values):
    if isinstance(values, list):
        return rng.choice(values)
    low, high = values["min"], values["max"]
    if SWEEPABLE[option]:
        if values["log"]:
            return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))
        return rng.randint(low, high)
    value = math.exp(rng.uniform(math.log(low), math.log(high))) if values["log"] else rng.uniform(low, high)
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def point_label(point: dict) -> str:
    """`learning_rate=0.001 lora_r=8`: a job's name within its sweep."""
    return " ".join(f"{option}={value:g}" for option, value in point.items())
