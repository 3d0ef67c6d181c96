"""Reading judges and their runs: the items a run judges, its summary (made once, by the worker,
when it succeeds), and the judge's agreement with the people who voted on the same pairs."""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations

from django.db.models import Count, Max

from apps.comparison.models import Comparison, Output, Vote
from apps.core.memo import memoized
from apps.evaluation.models import Judge, JudgeRun, Verdict
from workers.judging import PAIRWISE, PairItem, PointItem, Rubric, check_rubric, cohen_kappa
from workers.judging.stats import kappa_interval, pair_outcome, pairwise_summary, pointwise_summary


def judge_items(comparison: Comparison, rubric: Rubric) -> tuple[list, dict[str, tuple[int, int, int | None]]]:
    """The engine's items for a comparison — every output (pointwise), or every two outputs of a
    prompt (pairwise, `first` the lower column) — leaving out outputs that failed; and each item's
    (prompt id, first contestant id, second contestant id or None) by key."""
    outputs = (Output.objects.filter(comparison=comparison, error="").select_related("prompt", "contestant")
               .order_by("prompt__position", "contestant__position"))
    by_prompt: dict[int, list[Output]] = defaultdict(list)
    for output in outputs:
        by_prompt[output.prompt_id].append(output)
    items, index = [], {}
    for cells in by_prompt.values():
        prompt = cells[0].prompt
        if rubric.kind == PAIRWISE:
            for first, second in combinations(cells, 2):
                key = f"p{prompt.pk}:c{first.contestant_id}:c{second.contestant_id}"
                items.append(PairItem(key=key, prompt=prompt.text, first=first.text, second=second.text))
                index[key] = (prompt.pk, first.contestant_id, second.contestant_id)
        else:
            for cell in cells:
                key = f"p{prompt.pk}:c{cell.contestant_id}"
                items.append(PointItem(key=key, prompt=prompt.text, response=cell.text))
                index[key] = (prompt.pk, cell.contestant_id, None)
    return items, index


def project_judges(project):
    return Judge.objects.filter(project=project).select_related("local_model", "provider_model__provider")


def project_runs(project):
    return JudgeRun.objects.filter(project=project).select_related("judge", "comparison")


def summarize(run: JudgeRun) -> dict:
    """The run's figures from its stored verdicts (the worker writes them when the run succeeds)."""
    rubric = check_rubric(run.config["rubric"])
    verdicts = list(run.verdicts.all())
    columns = {c.pk: c for c in run.comparison.contestants.select_related("model")}
    names = {str(c.position): c.model.name for c in columns.values()}
    totals = {"calls": len(verdicts), "unparseable": sum(v.answer is None for v in verdicts),
              "prompt_tokens": sum(v.prompt_tokens for v in verdicts),
              "completion_tokens": sum(v.completion_tokens for v in verdicts), "models": names}
    if rubric.kind != PAIRWISE:
        figures = pointwise_summary(rubric, [(columns[v.first_id].position, v.answer) for v in verdicts])
        return {**totals, "kind": rubric.kind, **figures}
    lengths = {(o.prompt_id, o.contestant_id): len(o.text) for o in
               Output.objects.filter(comparison=run.comparison_id).only("prompt_id", "contestant_id", "text")}
    pairs: dict[str, dict] = {}
    for v in verdicts:
        pair = pairs.setdefault(v.item, {"first": columns[v.first_id].position, "second": columns[v.second_id].position,
                                         "in_order": None, "swapped": None,
                                         "first_len": lengths.get((v.prompt_id, v.first_id), 0),
                                         "second_len": lengths.get((v.prompt_id, v.second_id), 0)})
        pair["swapped" if v.swapped else "in_order"] = v.answer["winner"] if v.answer else None
    return {**totals, "kind": rubric.kind, **pairwise_summary(list(pairs.values()))}


# --- agreement with people (pairwise judges vs blind votes) --------------------------------------

def _human_label(vote: Vote, first_id: int) -> str:
    if vote.winner_id is None:
        return "tie"  # tie and both bad: neither is preferred
    return "first" if vote.winner_id == first_id else "second"


def agreement(run: JudgeRun) -> dict | None:
    """A succeeded pairwise run's agreement with the blind votes on the same pairs, next to the
    voters' agreement with each other. Labels first/second/tie; the judge's inconsistent verdicts
    (the two orders disagree) count as tie, its unparseable ones leave the item out. Each vote on a
    judged pair is one judge-vs-person item; each two votes by different people on the same pair
    are one person-vs-person item. Kappa is Cohen's over those items (None when undefined), with a
    95% bootstrap interval over the items."""
    if run.state != JudgeRun.State.SUCCEEDED or run.config.get("rubric", {}).get("kind") != PAIRWISE:
        return None
    votes = Vote.objects.filter(comparison=run.comparison_id)
    stamp = votes.aggregate(n=Count("id"), last=Max("id"))
    return memoized("judge-agreement", [run.pk, stamp["n"], stamp["last"]], lambda: _agreement(run))


def _agreement(run: JudgeRun) -> dict:
    answers: dict[tuple, dict] = defaultdict(dict)
    for v in Verdict.objects.filter(run=run).values("prompt_id", "first_id", "second_id", "swapped", "answer"):
        answers[(v["prompt_id"], v["first_id"], v["second_id"])][v["swapped"]] = \
            v["answer"]["winner"] if v["answer"] else None
    judged = {}
    for key, by_order in answers.items():
        outcome = pair_outcome(by_order.get(False), by_order.get(True))
        if outcome is not None:
            judged[key] = "tie" if outcome == "inconsistent" else outcome
    people: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    for vote in Vote.objects.filter(comparison=run.comparison_id).select_related("pair").order_by("id"):
        pair = vote.pair
        people[(pair.prompt_id, pair.first_id, pair.second_id)].append((vote.voter_id, _human_label(vote, pair.first_id)))
    judge_items = [(judged[key], label) for key, labels in people.items() if key in judged for _, label in labels]
    human_items = [(a[1], b[1]) for labels in people.values() for a, b in combinations(labels, 2) if a[0] != b[0]]

    def figures(items):
        interval = kappa_interval(items)
        return {"items": len(items), "kappa": cohen_kappa(items), "kappa_ci": list(interval) if interval else None,
                "agreement": round(sum(x == y for x, y in items) / len(items), 4) if items else None}

    return {"labels": ["first", "second", "tie"], "judge_vs_people": figures(judge_items),
            "people_vs_people": figures(human_items), "pairs_with_votes": len(people),
            "pairs_judged_and_voted": sum(key in judged for key in people)}
