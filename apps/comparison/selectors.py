"""Reads about comparisons: the grid, per-model summaries, leaderboards."""

from dataclasses import astuple, dataclass

from django.db.models import Count

from apps.comparison.models import Comparison, Contestant, Output, Vote
from apps.core.memo import memoized
from apps.core.rendering import render_markdown
from apps.projects.models import Project
from apps.registry.models import RegisteredModel

BOOTSTRAP_ROUNDS = 200
BOOTSTRAP_SEED = 0  # fixed: the same votes always show the same intervals


def cell_payload(output: Output) -> dict:
    return {"prompt": output.prompt_id, "contestant": output.contestant_id, "text": output.text,
            "html": render_markdown(output.text),
            "error": output.error, "finish_reason": output.finish_reason, "prompt_tokens": output.prompt_tokens,
            "completion_tokens": output.completion_tokens, "latency_s": output.latency_s,
            "tokens_per_s": output.tokens_per_s, "scores": output.scores}


def contestants(comparison: Comparison) -> list[Contestant]:
    return list(comparison.contestants.select_related("model__base_model", "provider_model__provider")
                .order_by("position"))


def contestant_payload(contestant: Contestant) -> dict:
    if contestant.provider_model_id:
        return {"id": contestant.pk, "position": contestant.position, "model": None,
                "provider_model": contestant.provider_model_id, "name": contestant.name, "kind": "provider",
                "base_model": None}
    model = contestant.model
    return {"id": contestant.pk, "position": contestant.position, "model": model.pk, "provider_model": None,
            "name": model.name, "kind": model.kind, "base_model": model.base_model_id}


@dataclass(frozen=True)
class Entrant:
    """What a leaderboard ranks: a model of the project (pk: its id) or a provider model (pk:
    "provider:<id>", so the two kinds of id never collide on one board)."""

    pk: int | str
    name: str
    kind: str


def entrant(contestant: Contestant) -> Entrant:
    if contestant.provider_model_id:
        return Entrant(entrant_key(None, contestant.provider_model_id), contestant.name, "provider")
    return Entrant(contestant.model_id, contestant.model.name, contestant.model.kind)


def entrant_key(model_id: int | None, provider_model_id: int | None) -> int | str | None:
    if model_id is not None:
        return model_id
    return f"provider:{provider_model_id}" if provider_model_id is not None else None


def grid_cells(comparison: Comparison) -> list[dict]:
    return [cell_payload(o) for o in comparison.outputs.order_by("prompt__position", "contestant__position")]


def model_summaries(comparison: Comparison) -> list[dict]:
    """Per contestant: cells done and failed, mean latency and tokens/s, and with references
    the exact-match rate, mean ROUGE-L and the perplexity of all references together."""
    sums = {c.pk: {"contestant": c.pk, "cells": 0, "errors": 0, "latency": [], "speed": [], "em": [], "rouge": [],
                   "nll": 0.0, "tokens": 0} for c in comparison.contestants.all()}
    for o in comparison.outputs.only("contestant_id", "error", "latency_s", "tokens_per_s", "scores"):
        s = sums[o.contestant_id]
        s["cells"] += 1
        if o.error:
            s["errors"] += 1
            continue
        if o.latency_s is not None:
            s["latency"].append(o.latency_s)
        if o.tokens_per_s is not None:
            s["speed"].append(o.tokens_per_s)
        if "exact_match" in o.scores:
            s["em"].append(o.scores["exact_match"])
            s["rouge"].append(o.scores["rouge_l"])
        if "reference_nll" in o.scores:
            s["nll"] += o.scores["reference_nll"]
            s["tokens"] += o.scores["reference_tokens"]

    def mean(values):
        return round(sum(values) / len(values), 4) if values else None

    import math

    return [{"contestant": s["contestant"], "cells": s["cells"], "errors": s["errors"],
             "mean_latency_s": mean(s["latency"]), "mean_tokens_per_s": mean(s["speed"]),
             "exact_match": mean(s["em"]), "rouge_l": mean(s["rouge"]),
             "perplexity": round(math.exp(s["nll"] / s["tokens"]), 4) if s["tokens"] else None}
            for s in sums.values()]


def comparison_leaderboard(comparison: Comparison) -> dict:
    return _leaderboard([entrant(c) for c in contestants(comparison)], _vote_kinds(comparison.votes.all()))


def project_leaderboard(project: Project) -> dict:
    """Every vote of every comparison of the project, by model: a model (or provider model) met
    in several comparisons is one line."""
    from apps.providers.models import ProviderModel

    kinds = _vote_kinds(Vote.objects.filter(comparison__project=project))
    keys = {k[0] for k in kinds} | {k[1] for k in kinds}
    local = RegisteredModel.all_objects.filter(pk__in=[k for k in keys if isinstance(k, int)])
    outside = ProviderModel.objects.filter(pk__in=[int(k.split(":")[1]) for k in keys if isinstance(k, str)])
    models = sorted([Entrant(m.pk, m.name, m.kind) for m in local]
                    + [Entrant(entrant_key(None, m.pk), str(m), "provider") for m in outside.select_related("provider")],
                    key=lambda e: (e.name, str(e.pk)))
    return _leaderboard(models, kinds)


def _vote_kinds(votes) -> list[tuple]:
    """(first, second, winner or None, choice, votes) for each kind of vote, each named by its
    entrant key: the database counts them, so the leaderboard's cost follows the models, not the votes."""
    rows = votes.order_by().values_list(
        "pair__first__model_id", "pair__first__provider_model_id", "pair__second__model_id",
        "pair__second__provider_model_id", "winner__model_id", "winner__provider_model_id", "choice",
    ).annotate(votes=Count("pk"))
    return [(entrant_key(f, fp), entrant_key(s, sp), entrant_key(w, wp), choice, count)
            for f, fp, s, sp, w, wp, choice, count in rows]


def leaderboard_of(models: list[Entrant], kinds: list[tuple]) -> dict:
    """The leaderboard of `models` from kinds of vote (first, second, winner or None, each an
    entrant key; choice a/b/tie/both_bad; count): the people's votes, or a judge's verdicts counted alike."""
    return _leaderboard(models, kinds)


def _leaderboard(models: list[Entrant], kinds: list[tuple]) -> dict:
    from workers.comparison import Outcome, leaderboard

    index = {m.pk: i for i, m in enumerate(models)}
    outcomes = []
    for first, second, winner, choice, count in kinds:
        if first not in index or second not in index:
            continue
        if choice in ("a", "b"):
            result = "a" if winner == first else "b"
        else:
            result = choice
        outcomes.append(Outcome(index[first], index[second], result, count))
    # Memoized on exactly its inputs: the board moves with the next vote, and only then is refitted.
    board = memoized("leaderboard", [len(models), [astuple(o) for o in outcomes], BOOTSTRAP_ROUNDS, BOOTSTRAP_SEED],
                     lambda: leaderboard(len(models), outcomes, rounds=BOOTSTRAP_ROUNDS, seed=BOOTSTRAP_SEED))
    return {
        "total_votes": board.total_votes,
        "models": [{"id": m.pk, "name": m.name, "kind": m.kind} for m in models],
        "standings": [{"rank": s.rank, "model": models[s.index].pk, "name": models[s.index].name,
                       "votes": s.votes, "wins": s.wins, "losses": s.losses, "ties": s.ties, "both_bad": s.both_bad,
                       "win_rate": round(s.win_rate, 4) if s.win_rate is not None else None,
                       "strength": round(s.strength, 6),
                       "rating": round(s.rating, 1) if s.rating is not None else None,
                       "ci_low": round(s.ci[0], 1) if s.ci else None, "ci_high": round(s.ci[1], 1) if s.ci else None}
                      for s in board.standings],
        "win_matrix": [[round(x, 4) if x is not None else None for x in row] for row in board.win_matrix],
        "games": board.games,
    }


def votes_by(comparison: Comparison, user) -> int:
    return comparison.votes.filter(voter=user).count()
