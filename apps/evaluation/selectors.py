"""Reading judges and their runs: the items a run judges, its summary (made once, by the worker,
when it succeeds), and the judge's agreement with the people who voted on the same pairs."""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import combinations

from django.db.models import Count, Exists, Max, OuterRef
from django.db.models.fields.json import KT

from apps.comparison.models import Comparison, Output, Vote
from apps.comparison.selectors import contestants, entrant, leaderboard_of
from apps.core.memo import memoized
from apps.evaluation.models import (
    CalibrationPolicy,
    EvalRun,
    EvalSuite,
    Judge,
    JudgeRun,
    Preference,
    Rating,
    TeacherRun,
    Verdict,
)
from workers.ingest.canonical import ROLES
from workers.judging import PAIRWISE, PairItem, PointItem, Rubric, check_rubric, cohen_kappa
from workers.judging.rubric import SCALE_1_5
from workers.judging.stats import (
    calibration,
    confusion,
    implied_preference,
    kappa_interval,
    pair_outcome,
    pairwise_summary,
    point_score,
    pointwise_summary,
    win_rate,
)
from workers.judging.stats import rating_agreement as workers_rating_agreement
from workers.teaching import MESSAGES, PROMPT, TeacherItem, prompt_messages


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


# --- runs over a dataset version's responses ------------------------------------------------------

TEXT_ROLES = ("prompt", "response", "reference", "label")  # a row's fields that hold text


def version_columns(version) -> list[str]:
    """Every column of a version by the name people see: its role columns, then its metadata keys."""
    roles = set(version.schema.get("roles", {}).values())
    return [*(r for r in ROLES if r in roles), *version.schema.get("metadata_keys", [])]


def column_texts(version, columns: list[str]) -> tuple[list[tuple[int, list[str | None]]], set[str]]:
    """Each row's text in `columns`, in order: (position, [text or None, ...]); and the columns
    that hold something other than text (a chat, a number, an object) in some row. A role column
    is its row field (a text role's; `messages` and the others are never text), a metadata key
    its value."""
    not_text = {c for c in columns if c in ROLES and c not in TEXT_ROLES}
    rows = [(row[0], _texts(columns, row[1:], not_text))
            for row in version.rows.order_by("position").values_list("position", *_ROW_FIELDS).iterator(chunk_size=2000)]
    return rows, not_text


_ROW_FIELDS = ("prompt", "response", "reference", "label", "metadata")


def _texts(columns: list[str], values: tuple, not_text: set[str]) -> list[str | None]:
    """A row's text in each column (values: its _ROW_FIELDS); a column holding something else is
    None there and added to `not_text`."""
    *fields, metadata = values
    by_role = dict(zip(_ROW_FIELDS, fields))
    texts = []
    for column in columns:
        value = by_role.get(column) if column in ROLES else (metadata or {}).get(column)
        if value is not None and not isinstance(value, str):
            not_text.add(column)
            value = None
        texts.append(value)
    return texts


def _all_text(texts: list[str | None]) -> bool:
    return all(t is not None and t.strip() for t in texts)


def rows_with_text(version, columns: list[str]) -> dict:
    """The positions of the rows with text in every one of `columns` (the rows a run reading them
    judges) and the columns holding something else than text in some row. Kept per version and
    columns: a version never changes, and people rating it ask on every row served."""
    def scan() -> dict:
        rows, not_text = column_texts(version, columns)
        return {"positions": [position for position, texts in rows if _all_text(texts)], "not_text": sorted(not_text)}

    return memoized("version-rows-with-text", [version.pk, version.content_hash, columns], scan)


def row_texts(version, position: int, columns: list[str]) -> list[str | None]:
    """One row's text in `columns` (read alone: people are served one row at a time)."""
    values = version.rows.filter(position=position).values_list(*_ROW_FIELDS).get()
    return _texts(columns, values, set())


def dataset_columns(config: dict) -> list[str]:
    """The columns a run over a version reads, in order: prompt, response[, second response]."""
    return [config[k] for k in ("prompt_column", "response_column", "second_response_column") if config.get(k)]


def dataset_judge_items(version, rubric: Rubric, config: dict) -> list:
    """The engine's items for a run over a version: each row with text in every column it reads
    (a row missing one is left out), keyed "r<position>": its response scored (pointwise), or its
    two responses compared (pairwise, `first` the response column)."""
    rows, _ = column_texts(version, dataset_columns(config))
    items = []
    for position, texts in rows:
        if not _all_text(texts):
            continue
        if rubric.kind == PAIRWISE:
            items.append(PairItem(key=f"r{position}", prompt=texts[0], first=texts[1], second=texts[2]))
        else:
            items.append(PointItem(key=f"r{position}", prompt=texts[0], response=texts[1]))
    return items


def _dataset_summary(run: JudgeRun, rubric: Rubric, verdicts: list[Verdict], totals: dict) -> dict:
    """A run over a version: its response column is column 0, the second response column 1; a
    pairwise run adds the response column's win rate over the second (tie and inconsistent count
    half, unparseable pairs are left out)."""
    columns = dataset_columns(run.config)[1:]
    totals = {**totals, "models": {str(i): name for i, name in enumerate(columns)}}
    if rubric.kind != PAIRWISE:
        return {**totals, "kind": rubric.kind, **pointwise_summary(rubric, [(0, v.answer) for v in verdicts])}
    rows, _ = column_texts(run.dataset_version, dataset_columns(run.config))
    lengths = {position: (len(texts[1] or ""), len(texts[2] or "")) for position, texts in rows}
    pairs: dict[str, dict] = {}
    for v in verdicts:
        first_len, second_len = lengths.get(v.position, (0, 0))
        pair = pairs.setdefault(v.item, {"first": 0, "second": 1, "in_order": None, "swapped": None,
                                         "first_len": first_len, "second_len": second_len})
        pair["swapped" if v.swapped else "in_order"] = v.answer["winner"] if v.answer else None
    figures = pairwise_summary(list(pairs.values()))
    return {**totals, "kind": rubric.kind, **figures, "win_rate": win_rate(figures["matchups"])}


def project_judges(project):
    return Judge.objects.filter(project=project).select_related("local_model", "provider_model__provider")


def project_runs(project):
    return JudgeRun.objects.filter(project=project).select_related("judge", "comparison", "dataset_version__dataset")


def summarize(run: JudgeRun) -> dict:
    """The run's figures from its stored verdicts (the worker writes them when the run succeeds)."""
    rubric = check_rubric(run.config["rubric"])
    verdicts = list(run.verdicts.all())
    if run.comparison_id is None:
        totals = {"calls": len(verdicts), "unparseable": sum(v.answer is None for v in verdicts),
                  "prompt_tokens": sum(v.prompt_tokens for v in verdicts),
                  "completion_tokens": sum(v.completion_tokens for v in verdicts)}
        return _dataset_summary(run, rubric, verdicts, totals)
    columns = {c.pk: c for c in run.comparison.contestants.select_related("model", "provider_model__provider")}
    names = {str(c.position): c.name for c in columns.values()}
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


# --- agreement with people (judges vs blind votes) ------------------------------------------------

LABELS = ("first", "second", "tie")


def calibration_policy(project) -> CalibrationPolicy:
    """The project's calibration threshold (the defaults, unsaved, where it set none)."""
    return CalibrationPolicy.objects.filter(project=project).first() or CalibrationPolicy(project=project)


def _human_label(vote: Vote, first_id: int) -> str:
    if vote.winner_id is None:
        return "tie"  # tie and both bad: neither is preferred
    return "first" if vote.winner_id == first_id else "second"


def agreement(run: JudgeRun, rules: CalibrationPolicy | None = None) -> dict | None:
    """A succeeded run's agreement with the blind votes on the same pairs, next to the voters'
    agreement with each other, and whether it meets the project's calibration threshold.

    Labels first/second/tie. A pairwise judge's inconsistent verdicts (the two orders disagree)
    count as tie, its unparseable ones leave the item out. A pointwise judge prefers, of the two
    outputs of a voted pair, the one with the higher score (workers.judging.stats.point_score: each
    criterion on 0..1, averaged), tie when equal; a pair with an unparseable answer is left out.
    Each vote on a judged pair is one judge-vs-person item; each two votes by different people on
    the same pair are one person-vs-person item. Per side: Cohen's kappa (None when undefined)
    with a 95% bootstrap interval over the items, the raw agreement, and the confusion table
    (people's label → the judge's; for two people, the earlier vote → the later)."""
    if run.state != JudgeRun.State.SUCCEEDED or "rubric" not in run.config:
        return None
    if run.comparison_id is None and check_rubric(run.config["rubric"]).kind == PAIRWISE:
        # A pairwise run over a version: people choose between the same rows' two responses.
        preferences = run_preferences(run)
        stamp = preferences.aggregate(n=Count("id"), last=Max("id"), changed=Max("updated_at"))
        figures = memoized("judge-preference-agreement", [run.pk, stamp["n"], stamp["last"], str(stamp["changed"])],
                           lambda: _preference_agreement(run, preferences))
    elif run.comparison_id is None:
        # A pointwise run over a version: people vote on no pair of it, but rate its responses.
        figures = {"labels": list(LABELS), "judge_vs_people": None, "people_vs_people": None}
    else:
        votes = Vote.objects.filter(comparison=run.comparison_id)
        stamp = votes.aggregate(n=Count("id"), last=Max("id"))
        figures = memoized("judge-agreement", [run.pk, stamp["n"], stamp["last"], 3], lambda: _agreement(run))
    ratings = rating_agreement(run)
    rules = rules or calibration_policy(run.project)
    checked = calibration(_calibration_figures(figures, ratings, rules), min_items=rules.min_items)
    return {**figures, "ratings": ratings, "calibration": {**checked, **_thresholds(rules)}}


def _calibration_figures(agreed: dict, ratings: dict | None, rules: CalibrationPolicy) -> list[dict]:
    """What calibration weighs: kappa with the votes (a run over a comparison) or with people's
    preferences (a pairwise run over a version) and, once people rated the judge's outputs or a
    version's responses, each criterion's rho (1-5) or kappa (pass/fail) with the ratings, each
    with its threshold."""
    votes = agreed["judge_vs_people"]
    figures = [] if votes is None else [{"label": "kappa", "items_label": f"items judged and {agreed['people']} on",
                                         "value": votes["kappa"], "items": votes["items"],
                                         "threshold": rules.min_kappa}]
    for criterion in ratings["criteria"] if ratings and (ratings["ratings"] or votes is None) else []:
        side, scaled = criterion["judge_vs_people"], criterion["scale"] == SCALE_1_5
        figures.append({"label": f"{criterion['name']} {'Spearman rho' if scaled else 'kappa'}",
                        "items_label": f"items judged and rated on {criterion['name']}",
                        "value": side["rho" if scaled else "kappa"], "items": side["items"],
                        "threshold": rules.min_correlation if scaled else rules.min_kappa})
    return figures


def _thresholds(rules: CalibrationPolicy) -> dict:
    return {"min_kappa": rules.min_kappa, "min_correlation": rules.min_correlation, "min_items": rules.min_items}


def judged_pairs(run: JudgeRun) -> dict[tuple[int, int, int], str]:
    """The run's verdict on each pair of outputs it can speak for, (prompt, first contestant,
    second contestant) → first/second/tie (first: the lower column), as `agreement` reads it."""
    rubric = check_rubric(run.config["rubric"])
    if rubric.kind == PAIRWISE:
        return _pair_labels(((v["prompt_id"], v["first_id"], v["second_id"]), v["swapped"], v["answer"]) for v in
                            Verdict.objects.filter(run=run).values("prompt_id", "first_id", "second_id", "swapped",
                                                                   "answer"))
    judged = {}
    positions = dict(run.comparison.contestants.values_list("pk", "position"))
    scores: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for v in Verdict.objects.filter(run=run, answer__isnull=False).values("prompt_id", "first_id", "answer"):
        scores[v["prompt_id"]].append((positions[v["first_id"]], v["first_id"], point_score(rubric, v["answer"])))
    for prompt_id, cells in scores.items():
        for (_, first, a), (_, second, b) in combinations(sorted(cells), 2):
            judged[(prompt_id, first, second)] = implied_preference(a, b)
    return judged


def _pair_labels(verdicts) -> dict:
    """A pairwise judge's label of each pair it can speak for (verdicts: (key, swapped, answer)
    for each order): first/second/tie, an inconsistent pair (its two orders disagree) a tie, an
    unparseable one left out."""
    answers: dict[tuple, dict] = defaultdict(dict)
    for key, swapped, answer in verdicts:
        answers[key][swapped] = answer["winner"] if answer else None
    judged = {}
    for key, by_order in answers.items():
        outcome = pair_outcome(by_order.get(False), by_order.get(True))
        if outcome is not None:
            judged[key] = "tie" if outcome == "inconsistent" else outcome
    return judged


def _agreement(run: JudgeRun) -> dict:
    people: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    for vote in Vote.objects.filter(comparison=run.comparison_id).select_related("pair").order_by("id"):
        pair = vote.pair
        people[(pair.prompt_id, pair.first_id, pair.second_id)].append((vote.voter_id, _human_label(vote, pair.first_id)))
    figures = _label_agreement(judged_pairs(run), people)
    return {**figures, "people": "voted", "pairs_with_votes": figures.pop("pairs_with_people"),
            "pairs_judged_and_voted": figures.pop("pairs_judged_and_people")}


def _label_agreement(judged: dict, people: dict[tuple, list[tuple[int, str]]]) -> dict:
    """The judge's labels (judged: pair → first/second/tie) against people's (people: pair → their
    (person, label), oldest first): each person's label on a judged pair one judge-vs-person item,
    each two people's on the same pair one person-vs-person item; per side Cohen's kappa with its
    bootstrap interval, the raw agreement and the confusion table."""
    judge_items = [(label, judged[key]) for key, labels in people.items() if key in judged for _, label in labels]
    human_items = [(a[1], b[1]) for labels in people.values() for a, b in combinations(labels, 2) if a[0] != b[0]]

    def figures(items):
        interval = kappa_interval(items)
        return {"items": len(items), "kappa": cohen_kappa(items), "kappa_ci": list(interval) if interval else None,
                "agreement": round(sum(x == y for x, y in items) / len(items), 4) if items else None,
                "confusion": confusion(items, LABELS)}

    return {"labels": list(LABELS), "judge_vs_people": figures(judge_items),
            "people_vs_people": figures(human_items), "pairs_with_people": len(people),
            "pairs_judged_and_people": sum(key in judged for key in people)}


def run_preferences(run: JudgeRun):
    """People's preferences between the two responses of the rows a pairwise run over a version
    judged, for its judge, in the run's columns."""
    return Preference.objects.filter(judge=run.judge_id, dataset_version=run.dataset_version_id,
                                     **{k: run.config.get(k) for k in ("prompt_column", "response_column",
                                                                       "second_response_column")})


def _preference_agreement(run: JudgeRun, preferences) -> dict:
    judged = _pair_labels((v["position"], v["swapped"], v["answer"])
                          for v in Verdict.objects.filter(run=run).values("position", "swapped", "answer"))
    people: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for rater, position, choice in preferences.order_by("id").values_list("rater_id", "position", "choice"):
        people[position].append((rater, choice))
    figures = _label_agreement(judged, people)
    return {**figures, "people": "chosen", "rows_with_preferences": figures.pop("pairs_with_people"),
            "rows_judged_and_chosen": figures.pop("pairs_judged_and_people"),
            "preferences": sum(len(labels) for labels in people.values()),
            "raters": len({rater for labels in people.values() for rater, _ in labels})}


# --- agreement with people (judges vs people's pointwise ratings) ---------------------------------

def run_ratings(run: JudgeRun):
    """People's ratings of what the run judged, for its judge: of the comparison's outputs, or of
    the version's rows read in the run's prompt and response columns."""
    ratings = Rating.objects.filter(judge=run.judge_id)
    if run.comparison_id is not None:
        return ratings.filter(output__comparison=run.comparison_id)
    return ratings.filter(dataset_version=run.dataset_version_id, prompt_column=run.config.get("prompt_column"),
                          response_column=run.config.get("response_column"))


def rating_agreement(run: JudgeRun) -> dict | None:
    """A pointwise run's scores against people's ratings (Rating) of the same outputs (or of the
    same rows of a version, in the same columns) on the judge's rubric, per criterion
    (workers.judging.stats.rating_agreement: rho, tau and MAE, or kappa, TPR and TNR, with
    intervals and item counts), judge vs people beside people vs people. None for a pairwise run.
    Responses the judge could not score are left out of judge-vs-people."""
    rubric = check_rubric(run.config["rubric"])
    if rubric.kind == PAIRWISE:
        return None
    ratings = run_ratings(run)
    stamp = ratings.aggregate(n=Count("id"), last=Max("id"), changed=Max("updated_at"))
    return memoized("judge-rating-agreement", [run.pk, stamp["n"], stamp["last"], str(stamp["changed"])],
                    lambda: _rating_agreement(run, rubric, ratings))


def _rating_agreement(run: JudgeRun, rubric: Rubric, ratings) -> dict:
    verdicts = Verdict.objects.filter(run=run, answer__isnull=False)
    rated: dict[tuple, list] = defaultdict(list)
    if run.comparison_id is None:  # a version's rows, by position
        judged = {(v["position"],): v["answer"] for v in verdicts.values("position", "answer")}
        for r in ratings.order_by("id").values("position", "rater_id", "answer"):
            rated[(r["position"],)].append((r["rater_id"], r["answer"]))
    else:
        judged = {(v["prompt_id"], v["first_id"]): v["answer"] for v in
                  verdicts.values("prompt_id", "first_id", "answer")}
        for r in ratings.order_by("id").values("output__prompt_id", "output__contestant_id", "rater_id", "answer"):
            rated[(r["output__prompt_id"], r["output__contestant_id"])].append((r["rater_id"], r["answer"]))
    return {"ratings": sum(len(people) for people in rated.values()), "outputs_rated": len(rated),
            "raters": len({rater for people in rated.values() for rater, _ in people}),
            "criteria": workers_rating_agreement(rubric, judged, dict(rated))}


def outputs_to_rate(judge: Judge, comparison: Comparison, rater) -> tuple[list[Output], int]:
    """The comparison's successful outputs `rater` has not rated for the judge, the least-rated
    first (so that ratings spread, as votes do) and in a random order among equals (so that the
    order never tells which column an output is), and how many the rater has rated."""
    counts = dict(Rating.objects.filter(judge=judge, output__comparison=comparison).values("output_id")
                  .annotate(n=Count("id")).values_list("output_id", "n"))
    mine = set(Rating.objects.filter(judge=judge, output__comparison=comparison, rater=rater)
               .values_list("output_id", flat=True))
    left = [o for o in Output.objects.filter(comparison=comparison, error="").select_related("prompt")
            if o.pk not in mine]
    random.SystemRandom().shuffle(left)
    return sorted(left, key=lambda o: counts.get(o.pk, 0)), len(mine)


def rows_to_judge(model, judge: Judge, version, columns: dict, positions: list[int], rater) -> tuple[list[int], int]:
    """Of a version's rows (`positions`: those with text in `columns`), those `rater` has not rated
    or chosen on (model: Rating or Preference) for the judge in these columns, the least-judged
    first and in a random order among equals; and how many the rater has done."""
    given = model.objects.filter(judge=judge, dataset_version=version, **columns)
    counts = dict(given.values("position").annotate(n=Count("id")).values_list("position", "n"))
    mine = set(given.filter(rater=rater).values_list("position", flat=True))
    left = [position for position in positions if position not in mine]
    random.SystemRandom().shuffle(left)
    return sorted(left, key=lambda position: counts.get(position, 0)), len(mine)


# --- judges on the leaderboard -----------------------------------------------------------------

def judge_boards(comparison: Comparison) -> list[dict]:
    """The comparison's leaderboard as each judge sees it: the newest succeeded run of each judge
    over this comparison, its verdict on every pair of outputs (judged_pairs) counted as one vote,
    ranked as the people's votes are (apps.comparison.selectors). Shown apart from the people's
    board, each with its agreement with them and whether it is calibrated."""
    columns = contestants(comparison)
    by_contestant = {c.pk: entrant(c) for c in columns}
    rules = calibration_policy(comparison.project)
    runs, seen = [], set()
    for run in (JudgeRun.objects.filter(comparison=comparison, state=JudgeRun.State.SUCCEEDED)
                .select_related("judge", "comparison", "project").order_by("-finished_at", "-id")):
        if run.judge_id not in seen and "rubric" in run.config:
            seen.add(run.judge_id)
            runs.append(run)
    boards = []
    for run in runs:
        counts: dict[tuple, int] = defaultdict(int)
        for (_, first, second), label in memoized("judge-pairs", [run.pk], lambda run=run: [
                [list(k), v] for k, v in judged_pairs(run).items()]):
            winner = {"first": first, "second": second}.get(label)
            choice = {"first": "a", "second": "b"}.get(label, "tie")
            counts[(by_contestant[first].pk, by_contestant[second].pk,
                    by_contestant[winner].pk if winner else None, choice)] += 1
        kinds = [(*key, n) for key, n in counts.items()]
        figures = agreement(run, rules)
        boards.append({"run": run.pk, "judge": run.judge_id, "name": run.judge.name, "kind": run.config["rubric"]["kind"],
                       "model": run.config.get("model", ""), "agreement": figures["judge_vs_people"],
                       "calibration": figures["calibration"],
                       "board": leaderboard_of([entrant(c) for c in columns], kinds)})
    return boards


# --- eval suites ----------------------------------------------------------------------------------

def project_suites(project):
    return EvalSuite.objects.filter(project=project).select_related("dataset_version__dataset", "baseline_model")


def project_eval_runs(project):
    return EvalRun.objects.filter(project=project).select_related("suite", "model")


def suite_rows(suite: EvalSuite) -> list[tuple[int, str, str | None]]:
    """The suite's items: (row position, prompt, reference — the row's reference, else its
    response) of every row of its version (or split) that has a prompt, in order."""
    rows = suite.dataset_version.rows.exclude(prompt__isnull=True).exclude(prompt="")
    if suite.split:
        rows = rows.filter(split=suite.split)
    return [(r["position"], r["prompt"], r["reference"] or r["response"] or None)
            for r in rows.order_by("position").values("position", "prompt", "reference", "response")]


def latest_run(suite: EvalSuite, model_id: int) -> EvalRun | None:
    """The model's newest succeeded run of the suite."""
    return (EvalRun.objects.filter(suite=suite, model_id=model_id, state=EvalRun.State.SUCCEEDED)
            .order_by("-finished_at", "-id").first())


def model_eval_results(model_id: int) -> list[EvalRun]:
    """Each suite's newest succeeded run of a model (the model and job pages show them, with the delta)."""
    runs, seen = [], set()
    for run in (EvalRun.objects.filter(model_id=model_id, state=EvalRun.State.SUCCEEDED).select_related("suite", "model")
                .order_by("-finished_at", "-id")):
        if run.suite_id not in seen:
            seen.add(run.suite_id)
            runs.append(run)
    return runs


def gate_refusal(project_id: int, alias: str, version_id: int) -> str | None:
    """Why moving the alias named `alias` onto the version is refused by the project's suites that
    gate it (None when every one passes): a version with no succeeded run of a gating suite, or
    whose newest run missed a threshold (which metric, its value against the threshold)."""
    reasons = []
    for suite in EvalSuite.objects.filter(project_id=project_id, gate_alias=alias).order_by("name"):
        run = latest_run(suite, version_id)
        if run is None:
            reasons.append(f"the eval suite “{suite.name}” gates @{alias} and this version has no finished run of it")
        elif not run.passed:
            reasons.append(f"the eval suite “{suite.name}” gates @{alias}: "
                           + "; ".join(f["reason"] for f in run.failures))
    return "; ".join(reasons) or None


def judge_calibration(judge: Judge) -> dict:
    """Whether the judge counts as calibrated: its newest succeeded run's agreement with the blind
    votes (and people's ratings, pointwise) against the project's thresholds (`calibrated`, and
    `reason` when not). A run over a dataset version counts once people rated its responses
    (pointwise) or chose between its two responses (pairwise) in the run's columns."""
    rules = calibration_policy(judge.project)
    read = {f"read_{k}": KT(f"config__{k}") for k in ("prompt_column", "response_column", "second_response_column")}
    same_rows = {"judge": OuterRef("judge"), "dataset_version": OuterRef("dataset_version"),
                 "prompt_column": OuterRef("read_prompt_column"), "response_column": OuterRef("read_response_column")}
    runs = (JudgeRun.objects.filter(judge=judge, state=JudgeRun.State.SUCCEEDED).annotate(**read).annotate(
        rated=Exists(Rating.objects.filter(**same_rows)),
        chosen=Exists(Preference.objects.filter(**same_rows,
                                                second_response_column=OuterRef("read_second_response_column"))))
            .select_related("project", "comparison").order_by("-finished_at", "-id"))
    for run in runs:
        if run.comparison_id is None and not (run.rated or run.chosen):
            continue  # no one rated or chose on that version's rows: no people to agree with
        figures = agreement(run, rules)
        if figures is not None:
            return figures["calibration"]
    return {"calibrated": False, "reason": "no finished run of it has been compared with people's votes, ratings or choices",
            **_thresholds(rules)}


def job_eval_results(job_id: int) -> list[EvalRun]:
    """The runs a fine-tune's success started (auto-run suites on its adapter), newest first."""
    return list(EvalRun.objects.filter(training_job_id=job_id).select_related("suite", "model")
                .order_by("-created_at", "-id"))


# --- teachers ------------------------------------------------------------------------------------


def prompt_columns(version) -> list[str]:
    """Where a teacher may read a version's prompts: its prompt column, its chat messages, or one
    of its metadata keys."""
    roles = set(version.schema.get("roles", {}).values())
    return [role for role in (PROMPT, MESSAGES) if role in roles] + list(version.schema.get("metadata_keys", []))


def teacher_items(version, column: str) -> list[TeacherItem]:
    """The teacher's items for a version: a row's prompt read from `column`, rows without one left out."""
    items = []
    for position, prompt, messages, metadata in (version.rows.order_by("position")
                                                 .values_list("position", "prompt", "messages", "metadata")
                                                 .iterator(chunk_size=2000)):
        asked = prompt_messages(column, prompt=prompt, messages=messages, metadata=metadata or {})
        if asked is not None:
            items.append(TeacherItem(position=position, messages=asked))
    return items


def project_teacher_runs(project):
    return TeacherRun.objects.filter(project=project).select_related("source_version__dataset", "version")


def teacher_panel(user, version) -> dict:
    """What the version page's teacher form needs: the runs on this version, where its prompts can
    be read, and the teachers this person may launch (models of the project with model.generate,
    provider models with provider.use)."""
    from apps.projects import policy
    from apps.providers.selectors import usable_models
    from apps.registry.models import RegisteredModel

    project = version.dataset.project
    perms = policy.project_permissions(user, project)
    local = (RegisteredModel.objects.filter(project=project, status=RegisteredModel.Status.READY).order_by("name")
             if "model.generate" in perms else RegisteredModel.objects.none())
    providers = usable_models(project) if "provider.use" in perms else []
    return {"runs": TeacherRun.objects.filter(source_version=version).select_related("version")[:10],
            "columns": prompt_columns(version), "local_models": local, "provider_models": providers,
            "can_launch": policy.can(user, "dataset.import", version.dataset) and bool(local or providers)}
