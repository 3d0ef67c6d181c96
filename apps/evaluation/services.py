"""Judges, eval suites and teachers. Judges: defining them, estimating and launching their runs over a
comparison's outputs, cancelling and deleting; teachers: estimating, launching and cancelling their runs
over a dataset version's prompts (writes; each asks the policy first).

A judge is checked whole when it is made, each refusal naming its field: a rubric with at least
one criterion (workers.judging.check_rubric), exactly one model (a ready model of the project,
or a provider model enabled for it, which also takes `provider.use`), a sane answer length.
"""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from apps.comparison.models import Comparison, Output
from apps.core.errors import Conflict, Invalid, NotFound
from apps.core.jobs import ask_to_cancel, enqueue
from apps.datasets.models import DatasetVersion
from apps.evaluation import selectors
from apps.evaluation.models import (
    CalibrationPolicy,
    EvalRun,
    EvalSuite,
    Judge,
    JudgeRun,
    Preference,
    Rating,
    TeacherRun,
)
from apps.evaluation.tasks import eval_run_task, judge_run_task, teacher_run_task
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project
from apps.providers import selectors as provider_selectors
from apps.providers import services as provider_services
from apps.registry.models import RegisteredModel
from workers.evaluation import JUDGED, MetricError, check_metrics
from workers.judging import PAIRWISE, POINTWISE, Rubric, RubricError, check_answer, check_rubric, estimate_cost
from workers.teaching import estimate_cost as estimate_teaching

MAX_NAME = 120
MIN_MAX_TOKENS, MAX_MAX_TOKENS = 16, 4096


def _rubric(rubric) -> dict:
    try:
        return check_rubric(rubric).as_dict()
    except RubricError as exc:
        field = "rubric" if exc.field == "rubric" else f"rubric.{exc.field}"
        raise Invalid(exc.message, field=field) from None


def _local_model(project: Project, model_id) -> RegisteredModel:
    try:
        model = RegisteredModel.objects.get(pk=int(model_id), project=project)
    except (RegisteredModel.DoesNotExist, ValueError, TypeError, OverflowError):
        raise Invalid("No such model in this project.", field="local_model") from None
    if model.status != RegisteredModel.Status.READY:
        raise Invalid(f"The model {model.name!r} is not ready.", field="local_model")
    return model


def judge_create(*, user, project: Project, name: str, rubric, local_model=None, provider_model=None,
                 max_tokens: int = 256, token=None, ip_address: str | None = None) -> Judge:
    policy.require(user, "compare.run", project, token)
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name or len(name) > MAX_NAME:
        raise Invalid(f"name is 1 to {MAX_NAME} characters.", field="name")
    checked = _rubric(rubric)
    if (local_model in (None, "")) == (provider_model in (None, "")):
        raise Invalid("A judge is either a model of the project or a provider model: give exactly one.",
                      field="local_model" if local_model in (None, "") else "provider_model")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not MIN_MAX_TOKENS <= max_tokens <= MAX_MAX_TOKENS:
        raise Invalid(f"max_tokens is between {MIN_MAX_TOKENS} and {MAX_MAX_TOKENS}.", field="max_tokens")
    judge = Judge(project=project, name=name, rubric=checked, max_tokens=max_tokens, created_by=user)
    if provider_model not in (None, ""):
        policy.require(user, "provider.use", project, token)
        try:
            judge.provider_model = provider_selectors.usable_model(project, provider_model)
        except NotFound as exc:
            raise Invalid(exc.message, field="provider_model") from None
    else:
        judge.local_model = _local_model(project, local_model)
    try:
        with transaction.atomic():
            judge.save()
            audit_record(actor=user, action="judge.create", project=project, target=judge, ip_address=ip_address,
                         after={"name": name, "rubric": checked, "model": judge.model_label})
    except IntegrityError:
        raise Invalid(f"A judge called {name!r} exists already.", field="name") from None
    return judge


def judge_delete(*, user, judge: Judge, token=None, ip_address: str | None = None) -> None:
    policy.require(user, "compare.run", judge.project, token)
    if judge.runs.filter(state__in=JudgeRun.ACTIVE).exists():
        raise Conflict("This judge is running; cancel its run first.")
    with transaction.atomic():
        audit_record(actor=user, action="judge.delete", project=judge.project, target=judge, ip_address=ip_address,
                     before={"name": judge.name})
        judge.delete()


def _comparison(user, judge: Judge, comparison_id, token) -> Comparison:
    try:
        comparison = policy.get_object(user, Comparison, comparison_id, "compare.view", token,
                                       project_id=judge.project_id)
    except NotFound:
        raise Invalid("No such comparison in this project.", field="comparison") from None
    if comparison.state != Comparison.State.SUCCEEDED:
        raise Conflict(f"The comparison {comparison.state}; a judge reads a finished one.")
    return comparison


def _estimate(judge: Judge, comparison: Comparison) -> dict:
    rubric = check_rubric(judge.rubric)
    items, _ = selectors.judge_items(comparison, rubric)
    return {**estimate_cost(rubric, items, max_tokens=judge.max_tokens), "model": judge.model_label,
            "kind": rubric.kind}


MAX_COLUMN = 200  # characters of a column's name


def _column(version: DatasetVersion, value, field: str, known: list[str], not_text: set[str]) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_COLUMN:
        raise Invalid(f"{field} is the name of a column of the version.", field=field)
    if value not in known:
        raise Invalid(f"Version {version.number} has no column {value[:80]!r} (its columns: "
                      f"{', '.join(known) or 'none'}).", field=field)
    if value in not_text:
        raise Invalid(f"The column {value!r} holds something other than text; a judge reads text.", field=field)
    return value


def _dataset_columns(user, judge: Judge, *, version, prompt_column, response_column, second_response_column,
                     token) -> tuple[DatasetVersion, dict]:
    """The version (one of the project's that the principal may read, else 404 naming `version`)
    and the columns it is judged on (each refusal naming its field: an unknown column, one that
    holds no text, the same column twice, a second response column for a pointwise judge or none
    for a pairwise one)."""
    version = _teacher_version(user, judge.project, version, "dataset.view", token)
    rubric = check_rubric(judge.rubric)
    given = {"prompt_column": prompt_column, "response_column": response_column}
    if rubric.kind == PAIRWISE:
        if second_response_column in (None, ""):
            raise Invalid(f"“{judge.name}” compares two responses: name the second_response_column.",
                          field="second_response_column")
        given["second_response_column"] = second_response_column
    elif second_response_column not in (None, ""):
        raise Invalid(f"“{judge.name}” scores one response: leave second_response_column out (or use a pairwise "
                      "judge).", field="second_response_column")
    known = selectors.version_columns(version)
    asked = [v for v in given.values() if isinstance(v, str) and v in known]
    not_text = set(selectors.rows_with_text(version, asked)["not_text"])
    columns = {field: _column(version, value, field, known, not_text) for field, value in given.items()}
    seen: dict[str, str] = {}
    for field, column in columns.items():
        if column in seen:
            raise Invalid(f"{field} is the column {seen[column]} reads already: choose another.", field=field)
        seen[column] = field
    return version, columns


def _dataset_source(user, judge: Judge, *, version, prompt_column, response_column, second_response_column,
                    token) -> tuple[DatasetVersion, dict, list]:
    """_dataset_columns, and the engine's items (none: refused, naming `version`)."""
    version, columns = _dataset_columns(user, judge, version=version, prompt_column=prompt_column,
                                        response_column=response_column,
                                        second_response_column=second_response_column, token=token)
    items = selectors.dataset_judge_items(version, check_rubric(judge.rubric), columns)
    if not items:
        raise Invalid(f"No row of version {version.number} has text in every one of {', '.join(columns.values())}: "
                      "nothing to judge.", field="version")
    return version, columns, items


def _source(user, judge: Judge, *, comparison, version, prompt_column, response_column, second_response_column,
            token) -> tuple[Comparison | None, DatasetVersion | None, dict, dict]:
    """What a run judges, exactly one of a comparison's outputs or a version's rows: (comparison,
    version, the columns for the run's config, the estimate)."""
    if (comparison in (None, "")) == (version in (None, "")):
        raise Invalid("A judge runs over a comparison or over a dataset version: give exactly one.",
                      field="comparison" if comparison in (None, "") else "version")
    if comparison not in (None, ""):
        comparison = _comparison(user, judge, comparison, token)
        return comparison, None, {}, _estimate(judge, comparison)
    version, columns, items = _dataset_source(user, judge, version=version, prompt_column=prompt_column,
                                              response_column=response_column,
                                              second_response_column=second_response_column, token=token)
    rubric = check_rubric(judge.rubric)
    estimate = {**estimate_cost(rubric, items, max_tokens=judge.max_tokens), "model": judge.model_label,
                "kind": rubric.kind}
    return None, version, columns, estimate


def judge_run_estimate(*, user, judge: Judge, comparison=None, version=None, prompt_column="prompt",
                       response_column="response", second_response_column=None, token=None) -> dict:
    """What a run of `judge` will cost, over the comparison's outputs or over the version's rows
    (read in prompt_column and response_column, and second_response_column for a pairwise judge):
    calls, items, tokens."""
    policy.require(user, "compare.view", judge.project, token)
    return _source(user, judge, comparison=comparison, version=version, prompt_column=prompt_column,
                   response_column=response_column, second_response_column=second_response_column, token=token)[3]


def judge_run_start(*, user, judge: Judge, comparison=None, version=None, prompt_column="prompt",
                    response_column="response", second_response_column=None, token=None,
                    ip_address: str | None = None) -> JudgeRun:
    """Queue a run of `judge` (compare.run; a provider judge also provider.use) over the
    comparison's outputs or the version's rows (dataset.view on its dataset), as estimate reads them."""
    policy.require(user, "compare.run", judge.project, token)
    if judge.provider_model_id:
        policy.require(user, "provider.use", judge.project, token)
    comparison, version, columns, estimate = _source(
        user, judge, comparison=comparison, version=version, prompt_column=prompt_column,
        response_column=response_column, second_response_column=second_response_column, token=token)
    if not estimate["calls"]:
        raise Invalid("This comparison has no outputs to judge.", field="comparison")
    config = {"rubric": judge.rubric, "max_tokens": judge.max_tokens, "local_model": judge.local_model_id,
              "provider_model": judge.provider_model_id, "model": judge.model_label, **columns}
    with transaction.atomic():
        run = JudgeRun.objects.create(project=judge.project, judge=judge, comparison=comparison,
                                      dataset_version=version, config=config, estimate=estimate,
                                      calls_total=estimate["calls"], created_by=user)
        source = {"comparison": comparison.pk} if comparison else {"version": version.pk, **columns}
        audit_record(actor=user, action="judge.run", project=judge.project, target=run, ip_address=ip_address,
                     after={"judge": judge.pk, **source, "calls": estimate["calls"]})
        transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def _enqueue(run_id: int) -> None:
    def fail(reason: str) -> None:
        JudgeRun.objects.filter(pk=run_id).update(state=JudgeRun.State.FAILED, error=reason,
                                                  finished_at=timezone.now())

    enqueue(judge_run_task, run_id, queue=JudgeRun.QUEUE, on_failure=fail)


def judge_run_cancel(*, user, run: JudgeRun, token=None, ip_address: str | None = None) -> JudgeRun:
    """A queued run ends at once; a running one stops after the item it is judging."""
    policy.require(user, "compare.run", run.project, token)
    with transaction.atomic():
        run = ask_to_cancel(JudgeRun, run.pk, what="run")
        audit_record(actor=user, action="judge.cancel", project=run.project, target=run, ip_address=ip_address)
    return run


def calibration_policy_update(*, user, project: Project, token=None, ip_address: str | None = None,
                              **values) -> CalibrationPolicy:
    """Set how well a judge must agree with people to count as calibrated: `min_kappa` (-1 to 1)
    and `min_items` (1 to 100000); project.edit, as the project's other rules."""
    policy.require(user, "project.edit", project, token)
    rules = selectors.calibration_policy(project)
    before = {"min_kappa": rules.min_kappa, "min_correlation": rules.min_correlation, "min_items": rules.min_items}
    for field, value in values.items():
        if field in ("min_kappa", "min_correlation"):
            if isinstance(value, bool) or not isinstance(value, int | float) or not -1 <= value <= 1:
                raise Invalid(f"{field} is a number from -1 to 1.", field=field)
            setattr(rules, field, float(value))
        elif field == "min_items":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
                raise Invalid("min_items is a whole number from 1 to 100000.", field=field)
            rules.min_items = value
        else:
            raise Invalid(f"unknown setting {field!r}", field=field)
    rules.updated_by = user
    with transaction.atomic():
        rules.save()
        audit_record(actor=user, action="judge.calibration_update", target=project, project=project,
                     ip_address=ip_address, before=before,
                     after={"min_kappa": rules.min_kappa, "min_correlation": rules.min_correlation,
                            "min_items": rules.min_items})
    return rules


# --- people's ratings of outputs, beside a pointwise judge's ------------------------------------

MAX_REASON = 2000  # characters of a rater's reason for one criterion


def _ratable(judge: Judge, comparison: Comparison) -> Rubric:
    rubric = check_rubric(judge.rubric)
    if rubric.kind != POINTWISE:
        raise Conflict(f"“{judge.name}” compares two answers; people rate outputs for a pointwise judge.")
    if comparison.state != Comparison.State.SUCCEEDED:
        raise Conflict(f"The comparison {comparison.state}; its outputs are rated once it has finished.")
    return rubric


def rating_next(*, user, judge: Judge, comparison: Comparison, token=None) -> dict:
    """The next output of the comparison for this person to rate on the judge's rubric, blind (the
    prompt and the output, no model), the least-rated first; None when none is left. With how many
    they rated and how many are left."""
    policy.require(user, "compare.vote", comparison, token)
    _ratable(judge, comparison)
    left, rated = selectors.outputs_to_rate(judge, comparison, user)
    return {"output": left[0] if left else None, "rated": rated, "remaining": len(left)}


def rating_submit(*, user, judge: Judge, comparison: Comparison, output, answer, token=None) -> tuple[Rating, bool]:
    """Record this person's rating of one output of the comparison on the judge's rubric, checked
    against the rubric's answer schema (each refusal naming its place: `answer.<criterion>.score`);
    a second rating of the same output replaces the first. Returns (rating, created)."""
    policy.require(user, "compare.vote", comparison, token)
    rubric = _ratable(judge, comparison)
    try:
        target = Output.objects.get(pk=int(output), comparison=comparison, error="")
    except (Output.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound("No such output in this comparison.") from None
    _check_rating(answer, rubric)
    return _save_rating(Rating, user=user, judge=judge, target={"output": target}, given={"answer": answer},
                        action="judge.rate", audited={"output": target.pk})


def _save_rating(model, *, user, judge: Judge, target: dict, given: dict, action: str, audited: dict) -> tuple:
    """A person's rating or preference of `target` (the fields naming what was rated) for the
    judge, `given` replacing theirs if they gave one before, and its audit record (not published:
    people rate fast). Returns (the row, created)."""
    with transaction.atomic():
        saved, created = model.objects.update_or_create(judge=judge, rater=user, **target, defaults=given)
        audit_record(actor=user, action=action, project=judge.project, target=judge, publish=False,
                     after={**audited, "replaced": not created})
    return saved, created


def _check_rating(answer, rubric: Rubric) -> None:
    """The answer against the rubric's schema, and each reason's length (Invalid naming `answer.<criterion>.<key>`)."""
    where, why = check_answer(answer, rubric)
    if why:
        raise Invalid(why, field="answer" if where == "answer" else "answer." + where.replace("/", "."))
    for criterion in rubric.criteria:
        if len(answer[criterion.name]["reason"]) > MAX_REASON:
            raise Invalid(f"A reason is at most {MAX_REASON} characters.", field=f"answer.{criterion.name}.reason")


# --- people's ratings and preferences of a version's rows, beside a judge's run over it ---------

REFUSED_KIND = {
    POINTWISE: "“{name}” scores one response; people choose between two responses for a pairwise judge.",
    PAIRWISE: "“{name}” compares two answers; people rate responses for a pointwise judge.",
}


def _version_rows(user, judge: Judge, kind: str, version, columns: dict, token) -> tuple[DatasetVersion, dict,
                                                                                          list[int]]:
    """The rows of the version a run of the judge (of `kind`, else Conflict) reads in `columns`,
    with the same checks (each refusal naming its field; a version the principal may not read, or
    another project's: 404): the version, its columns, and the positions of the rows with text in
    every one of them."""
    judged = check_rubric(judge.rubric).kind
    if judged != kind:
        raise Conflict(REFUSED_KIND[judged].format(name=judge.name))
    version, columns = _dataset_columns(user, judge, version=version, token=token,
                                        **{"second_response_column": None, **columns})
    return version, columns, selectors.rows_with_text(version, list(columns.values()))["positions"]


def _check_position(version: DatasetVersion, columns: dict, positions: list[int], position) -> int:
    if isinstance(position, bool) or not isinstance(position, int) or position not in set(positions):
        raise Invalid(f"Version {version.number} has no row {str(position)[:20]} with text in "
                      f"{', '.join(repr(c) for c in columns.values())}.", field="position")
    return position


def row_rating_next(*, user, judge: Judge, version, prompt_column="prompt", response_column="response",
                    token=None) -> dict:
    """The next row of the version for this person to rate on the judge's rubric, blind (the
    prompt and the response read in the columns a run of the judge reads, nothing else of the
    row), the least-rated first; None when none is left. With how many they rated and how many are
    left. compare.vote, as comparison ratings, and dataset.view on the version's dataset."""
    policy.require(user, "compare.vote", judge.project, token)
    version, columns, positions = _version_rows(user, judge, POINTWISE, version, {
        "prompt_column": prompt_column, "response_column": response_column}, token)
    left, rated = selectors.rows_to_judge(Rating, judge, version, columns, positions, user)
    row = None
    if left:
        prompt, response = selectors.row_texts(version, left[0], list(columns.values()))
        row = {"position": left[0], "prompt": prompt, "response": response}
    return {"row": row, "rated": rated, "remaining": len(left)}


def row_rating_submit(*, user, judge: Judge, version, position, answer, prompt_column="prompt",
                      response_column="response", token=None) -> tuple[Rating, bool]:
    """Record this person's rating of one row's response of the version on the judge's rubric (a
    row with no text in either column, or none at `position`: Invalid naming `position`); a second
    rating of the same row and columns replaces the first. Returns (rating, created)."""
    policy.require(user, "compare.vote", judge.project, token)
    version, columns, positions = _version_rows(user, judge, POINTWISE, version, {
        "prompt_column": prompt_column, "response_column": response_column}, token)
    position = _check_position(version, columns, positions, position)
    _check_rating(answer, check_rubric(judge.rubric))
    return _save_rating(Rating, user=user, judge=judge, given={"answer": answer},
                        target={"dataset_version": version, "position": position, **columns},
                        action="judge.rate", audited={"version": version.pk, "position": position, **columns})


def shown_swapped(user, judge: Judge, version: DatasetVersion, position: int, columns: dict) -> bool:
    """Whether this person is shown the row's second response as A: random to them (a keyed hash
    of who, which judge, row and columns), and the same each time, so that what they chose maps
    back to a column without storing what was served."""
    subject = ":".join(str(part) for part in (user.pk, judge.pk, version.pk, position, *columns.values()))
    return salted_hmac("evaluation.preference-order", subject).digest()[0] & 1 == 1


CHOICES = {"a": ("first", "second"), "b": ("second", "first"), "tie": ("tie", "tie")}  # A/B → (in order, swapped)


def row_preference_next(*, user, judge: Judge, version, prompt_column="prompt", response_column="response",
                        second_response_column, token=None) -> dict:
    """The next row of the version for this person to choose on for the pairwise judge, blind:
    the prompt and the row's two responses as A and B in an order random to them (never which
    column each is), the rows with fewest preferences first; None when none is left. With how
    many they chose on and how many are left. Who may: as for row ratings."""
    policy.require(user, "compare.vote", judge.project, token)
    version, columns, positions = _version_rows(user, judge, PAIRWISE, version, {
        "prompt_column": prompt_column, "response_column": response_column,
        "second_response_column": second_response_column}, token)
    left, chosen = selectors.rows_to_judge(Preference, judge, version, columns, positions, user)
    row = None
    if left:
        prompt, first, second = selectors.row_texts(version, left[0], list(columns.values()))
        a, b = (second, first) if shown_swapped(user, judge, version, left[0], columns) else (first, second)
        row = {"position": left[0], "prompt": prompt, "a": a, "b": b}
    return {"row": row, "chosen": chosen, "remaining": len(left)}


def row_preference_submit(*, user, judge: Judge, version, position, choice, prompt_column="prompt",
                          response_column="response", second_response_column,
                          token=None) -> tuple[Preference, bool]:
    """Record which of the row's two responses this person prefers (choice a, b or tie, as they
    were shown by row_preference_next), mapped back to first (response_column), second or tie; a
    second choice on the same row and columns replaces the first. Returns (preference, created)."""
    policy.require(user, "compare.vote", judge.project, token)
    version, columns, positions = _version_rows(user, judge, PAIRWISE, version, {
        "prompt_column": prompt_column, "response_column": response_column,
        "second_response_column": second_response_column}, token)
    position = _check_position(version, columns, positions, position)
    if choice not in CHOICES:
        raise Invalid("choice is a, b or tie.", field="choice")
    swapped = shown_swapped(user, judge, version, position, columns)
    preferred = CHOICES[choice][swapped]
    return _save_rating(Preference, user=user, judge=judge, given={"choice": preferred, "swapped": swapped},
                        target={"dataset_version": version, "position": position, **columns},
                        action="judge.prefer",
                        audited={"version": version.pk, "position": position, **columns, "choice": preferred})


# --- eval suites ----------------------------------------------------------------------------------

MAX_SUITE_ITEMS = 500  # as a comparison's prompts: a suite reruns after every fine-tune
MIN_NEW_TOKENS, MAX_NEW_TOKENS = 1, 1024


def _suite_model(user, project: Project, ref, field: str, token) -> RegisteredModel:
    """A ready model of the project the principal may see; anything else Invalid naming `field`."""
    visible = policy.visible_in_project(user, RegisteredModel, project, "model.view", token)
    model = None
    if isinstance(ref, int) and not isinstance(ref, bool):
        model = visible.filter(pk=ref).first()
    if model is None:
        raise Invalid(f"No such model in this project: {str(ref)[:40]}.", field=field)
    if model.status != RegisteredModel.Status.READY:
        raise Invalid(f"The model “{model.name}” is {model.status}, not ready.", field=field)
    return model


def eval_suite_create(*, user, project: Project, name: str, dataset_version, metrics, split: str = "",
                      baseline_model=None, max_new_tokens: int = 64, gate_alias: str = "", auto_run: bool = False,
                      token=None, ip_address: str | None = None) -> EvalSuite:
    """Check a suite whole (each refusal naming its field) and save it. A dataset version the
    principal cannot read in this project is not found (404)."""
    from apps.datasets.selectors import readable_version
    from apps.registry.models import ALIAS_NAME

    policy.require(user, "compare.run", project, token)
    name = " ".join(name.split()) if isinstance(name, str) else ""
    if not name or len(name) > MAX_NAME:
        raise Invalid(f"name is 1 to {MAX_NAME} characters.", field="name")
    try:
        checked = check_metrics(metrics)
    except MetricError as exc:
        raise Invalid(exc.message, field=exc.field) from None
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or not MIN_NEW_TOKENS <= max_new_tokens <= MAX_NEW_TOKENS:
        raise Invalid(f"max_new_tokens is a whole number from {MIN_NEW_TOKENS} to {MAX_NEW_TOKENS}.",
                      field="max_new_tokens")
    if not isinstance(gate_alias, str) or (gate_alias and not re.match(ALIAS_NAME, gate_alias)):
        raise Invalid("gate_alias is an alias name (production, staging, team-a) or empty.", field="gate_alias")
    if gate_alias and not any(m["threshold"] is not None for m in checked):
        raise Invalid("A suite that gates an alias needs a threshold on at least one metric.", field="metrics")
    if not isinstance(auto_run, bool):
        raise Invalid("auto_run is true or false.", field="auto_run")
    if not isinstance(split, str) or len(split) > 64:
        raise Invalid("split is a split name (train, validation, test) or empty for every row.", field="split")
    try:
        version = readable_version(user, project, dataset_version, token)
    except Invalid:
        raise NotFound("No such dataset version in this project.") from None
    split = split.strip()
    if split and not version.rows.filter(split=split).exists():
        raise Invalid(f"Version {version.number} has no “{split}” split.", field="split")
    baseline = None if baseline_model is None else _suite_model(user, project, baseline_model, "baseline_model",
                                                                token)
    _check_judged(user, project, checked, baseline, gate_alias, token)
    suite = EvalSuite(project=project, name=name, dataset_version=version, split=split, metrics=checked,
                      baseline_model=baseline, max_new_tokens=max_new_tokens, gate_alias=gate_alias,
                      auto_run=auto_run, created_by=user)
    items = len(selectors.suite_rows(suite))
    if not items:
        raise Invalid("No row of that version (or split) has a prompt: the suite would be empty.", field="split")
    if items > MAX_SUITE_ITEMS:
        raise Invalid(f"The suite would hold {items} prompts; at most {MAX_SUITE_ITEMS} (choose a split).",
                      field="split")
    try:
        with transaction.atomic():
            suite.save()
            audit_record(actor=user, action="eval_suite.create", project=project, target=suite,
                         ip_address=ip_address, after={"name": name, "dataset_version": version.pk, "split": split,
                                                       "metrics": checked, "gate_alias": gate_alias,
                                                       "baseline_model": baseline.pk if baseline else None})
    except IntegrityError:
        raise Invalid(f"This project already has a suite called “{name}”.", field="name") from None
    return suite


def _check_judged(user, project: Project, metrics: list[dict], baseline, gate_alias: str, token) -> None:
    """A judge metric names a judge of the project: pointwise with that criterion for a criterion's
    score, pairwise (and a baseline to play against) for a win rate; a provider judge takes
    `provider.use`. A judge that is not calibrated reports but may not gate: no threshold on it in a
    suite that gates an alias."""
    for i, metric in enumerate(metrics):
        if metric["metric"] not in JUDGED:
            continue
        field = f"metrics[{i}]"
        judge = Judge.objects.filter(project=project, pk=metric["judge"]).select_related("project").first()
        if judge is None:
            raise Invalid("No such judge in this project.", field=f"{field}.judge")
        if judge.provider_model_id:
            policy.require(user, "provider.use", project, token)
        if metric["metric"] == "judge":
            if judge.kind != POINTWISE:
                raise Invalid(f"“{judge.name}” compares two answers; a criterion's score needs a pointwise judge.",
                              field=f"{field}.judge")
            criteria = [c["name"] for c in judge.rubric.get("criteria", [])]
            if metric["criterion"] not in criteria:
                raise Invalid(f"“{judge.name}” has no criterion {metric['criterion']!r}: one of "
                              f"{', '.join(criteria)}.", field=f"{field}.criterion")
        else:
            if judge.kind != PAIRWISE:
                raise Invalid(f"“{judge.name}” scores one answer; a win rate needs a pairwise judge.",
                              field=f"{field}.judge")
            if baseline is None:
                raise Invalid("A win rate is against the suite's baseline: choose a baseline_model.",
                              field="baseline_model")
        if gate_alias and metric["threshold"] is not None:
            calibration = selectors.judge_calibration(judge)
            if not calibration["calibrated"]:
                raise Invalid(f"The judge “{judge.name}” is not calibrated ({calibration['reason']}), so it cannot "
                              f"gate @{gate_alias}: drop this metric's threshold, or calibrate the judge against "
                              "people's votes first.", field=f"{field}.threshold")


def eval_run_start(*, user, suite: EvalSuite, model, token=None, ip_address: str | None = None) -> EvalRun:
    """Queue a run of the suite for a ready model of the project (the `inference` queue)."""
    policy.require(user, "compare.run", suite.project, token)
    if Judge.objects.filter(pk__in=[m["judge"] for m in suite.metrics if m["metric"] in JUDGED],
                            provider_model__isnull=False).exists():
        policy.require(user, "provider.use", suite.project, token)  # its provider judge calls out for them
    chosen = _suite_model(user, suite.project, model, "model", token)
    with transaction.atomic():
        run = _queue_run(suite, chosen, user)
        audit_record(actor=user, action="eval_suite.run", project=suite.project, target=run, ip_address=ip_address,
                     after={"suite": suite.pk, "model": chosen.pk})
    return run


def _queue_run(suite: EvalSuite, model: RegisteredModel, user, training_job=None) -> EvalRun:
    total = len(selectors.suite_rows(suite))
    run = EvalRun.objects.create(project=suite.project, suite=suite, model=model, items_total=total,
                                 training_job=training_job, created_by=user)
    transaction.on_commit(lambda: _enqueue_eval(run.pk))
    return run


def eval_runs_after_fine_tune(job) -> list[EvalRun]:
    """The runs a succeeded fine-tune starts: one of each of its project's auto-run suites for its
    adapter, for whom launched the job (the training runner calls it as the job succeeds)."""
    if job.adapter_id is None:
        return []
    runs = []
    for suite in EvalSuite.objects.filter(project_id=job.project_id, auto_run=True).select_related("project"):
        run = _queue_run(suite, job.adapter, job.created_by, training_job=job)
        audit_record(actor=None, action="eval_suite.run", project=suite.project, target=run,
                     after={"suite": suite.pk, "model": job.adapter_id, "training_job": job.pk})
        runs.append(run)
    return runs


def _enqueue_eval(run_id: int) -> None:
    def fail(reason: str) -> None:
        EvalRun.objects.filter(pk=run_id).update(state=EvalRun.State.FAILED, error=reason, finished_at=timezone.now())

    enqueue(eval_run_task, run_id, queue=EvalRun.QUEUE, on_failure=fail)


def eval_run_cancel(*, user, run: EvalRun, token=None, ip_address: str | None = None) -> EvalRun:
    """A queued run ends at once; a running one stops after the batch in hand."""
    policy.require(user, "compare.run", run.project, token)
    with transaction.atomic():
        run = ask_to_cancel(EvalRun, run.pk, what="run")
        audit_record(actor=user, action="eval_suite.cancel", project=run.project, target=run, ip_address=ip_address)
    return run


# --- teachers (distillation) ---------------------------------------------------------------------

MAX_TEMPERATURE = 2.0
MAX_SEED = 2**31 - 1
MAX_PROVIDER_REF = 320
MAX_ID = 2**63 - 1  # the database's bigint: a larger id is no row, not a crash


def _object_id(value, field: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise Invalid(f"{field} is the id of {what}.", field=field)
    return value


def _not_found(message: str, field: str) -> NotFound:
    missing = NotFound(message)
    missing.field = field
    return missing


def _teacher_version(user, project: Project, version_id, permission: str, token) -> DatasetVersion:
    version = (DatasetVersion.objects.select_related("dataset")
               .filter(pk=_object_id(version_id, "version", "a dataset version"), dataset__project=project, dataset__deleted_at__isnull=True,
                       status=DatasetVersion.Status.READY).first())
    if version is None:
        raise _not_found("No such dataset version in this project.", "version")
    policy.require(user, "dataset.view", version.dataset, token)
    policy.require(user, permission, version.dataset, token)
    return version


def _prompt_column(version: DatasetVersion, column) -> str:
    columns = selectors.prompt_columns(version)
    if column in (None, ""):
        column = next((c for c in ("messages", "prompt") if c in columns), None)
        if column is None:
            raise Invalid(f"Version {version.number} has no prompt or messages column; name a metadata column.",
                          field="prompt_column")
    if not isinstance(column, str) or column not in columns:
        known = ", ".join(columns) or "none"
        raise Invalid(f"Version {version.number} has no column {str(column)[:80]!r} (its columns: {known}).",
                      field="prompt_column")
    return column


def _teacher(user, project: Project, local_model, provider_model, token) -> dict:
    """The teacher's part of a run's config: exactly one of a ready model of the project (asked
    with model.generate) or a provider model enabled for it (provider.use, and the project lets
    its data go out). Another project's model or an unknown one: 404."""
    if (local_model in (None, "")) == (provider_model in (None, "")):
        raise Invalid("A teacher is either a model of the project or a provider model: give exactly one.",
                      field="local_model" if local_model in (None, "") else "provider_model")
    if provider_model not in (None, ""):
        policy.require(user, "provider.use", project, token)
        if isinstance(provider_model, int) and not isinstance(provider_model, bool):
            _object_id(provider_model, "provider_model", "a provider model")
        elif not isinstance(provider_model, str) or len(provider_model) > MAX_PROVIDER_REF:
            raise Invalid("provider_model is a provider model's id or provider/model name.", field="provider_model")
        try:
            model = provider_selectors.usable_model(project, provider_model)
        except NotFound as exc:
            raise _not_found(exc.message, "provider_model") from None
        provider_services.require_outside_allowed(project)
        return {"provider_model": model.pk, "local_model": None, "teacher": str(model)}
    policy.require(user, "model.generate", project, token)
    model = RegisteredModel.objects.filter(pk=_object_id(local_model, "local_model", "a model of the project"), project=project, deleted_at__isnull=True).first()
    if model is None:
        raise _not_found("No such model in this project.", "local_model")
    if model.status != RegisteredModel.Status.READY:
        raise Invalid(f"The model {model.name!r} is not ready.", field="local_model")
    return {"local_model": model.pk, "provider_model": None, "teacher": model.name}


def _generation(max_tokens, temperature, seed) -> dict:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not MIN_MAX_TOKENS <= max_tokens <= MAX_MAX_TOKENS:
        raise Invalid(f"max_tokens is a whole number from {MIN_MAX_TOKENS} to {MAX_MAX_TOKENS}.", field="max_tokens")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) \
            or not 0 <= temperature <= MAX_TEMPERATURE:
        raise Invalid(f"temperature is a number from 0 to {MAX_TEMPERATURE:g}.", field="temperature")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise Invalid(f"seed is a whole number from 0 to {MAX_SEED}, or null.", field="seed")
    return {"max_tokens": max_tokens, "temperature": float(temperature), "seed": seed}


def _teacher_plan(user, project: Project, *, version, prompt_column, local_model, provider_model, max_tokens,
                  temperature, seed, permission: str, token) -> tuple[DatasetVersion, dict, dict]:
    """The version, the run's config and its estimate, every input checked (each refusal naming its field)."""
    version = _teacher_version(user, project, version, permission, token)
    column = _prompt_column(version, prompt_column)
    generation = _generation(max_tokens, temperature, seed)
    config = {**_teacher(user, project, local_model, provider_model, token), **generation, "prompt_column": column}
    items = selectors.teacher_items(version, column)
    if not items:
        raise Invalid(f"No row of version {version.number} has a prompt in {column!r}.", field="prompt_column")
    estimate = {**estimate_teaching(items, max_tokens=generation["max_tokens"]), "rows": len(items),
                "teacher": config["teacher"], "max_cost": None}
    if config["provider_model"]:
        cost = provider_services.call_cost(estimate["prompt_tokens"], estimate["max_completion_tokens"],
                                           provider_selectors.usable_model(project, config["provider_model"]))
        estimate["max_cost"] = str(cost) if cost is not None else None
    return version, config, estimate


def teacher_run_estimate(*, user, project: Project, version, prompt_column=None, local_model=None,
                         provider_model=None, max_tokens: int = 256, temperature=0.0, seed=None, token=None) -> dict:
    """What a teacher run would take, before launch: rows, calls, tokens (prompt tokens estimated
    from characters), and for a priced provider the most it can cost."""
    return _teacher_plan(user, project, version=version, prompt_column=prompt_column, local_model=local_model,
                         provider_model=provider_model, max_tokens=max_tokens, temperature=temperature, seed=seed,
                         permission="dataset.view", token=token)[2]


def teacher_run_start(*, user, project: Project, version, prompt_column=None, local_model=None, provider_model=None,
                      max_tokens: int = 256, temperature=0.0, seed=None, token=None,
                      ip_address: str | None = None) -> TeacherRun:
    """Queue a teacher run over a version's prompts; its answers become the dataset's next version
    (dataset.import on the dataset, and the teacher's own permission)."""
    version, config, estimate = _teacher_plan(
        user, project, version=version, prompt_column=prompt_column, local_model=local_model,
        provider_model=provider_model, max_tokens=max_tokens, temperature=temperature, seed=seed,
        permission="dataset.import", token=token)
    with transaction.atomic():
        run = TeacherRun.objects.create(project=project, source_version=version, config=config, estimate=estimate,
                                        rows_total=estimate["rows"], created_by=user)
        audit_record(actor=user, action="teacher.run", project=project, target=run, ip_address=ip_address,
                     after={"version": version.pk, **config, "rows": estimate["rows"]})
        transaction.on_commit(lambda: _enqueue_teacher(run.pk))
    return run


def _enqueue_teacher(run_id: int) -> None:
    def fail(reason: str) -> None:
        TeacherRun.objects.filter(pk=run_id).update(state=TeacherRun.State.FAILED, error=reason,
                                                    finished_at=timezone.now())

    enqueue(teacher_run_task, run_id, queue=TeacherRun.QUEUE, on_failure=fail)


def teacher_run_cancel(*, user, run: TeacherRun, token=None, ip_address: str | None = None) -> TeacherRun:
    """A queued run ends at once; a running one stops after the round in hand (or its import)."""
    policy.require(user, "dataset.import", run.source_version.dataset, token)
    with transaction.atomic():
        run = ask_to_cancel(TeacherRun, run.pk, what="teacher run")
        audit_record(actor=user, action="teacher.cancel", project=run.project, target=run, ip_address=ip_address)
    return run
