from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.comparison.models import Comparison
from apps.core.errors import NotFound
from apps.datasets.models import Dataset, DatasetVersion
from apps.evaluation import selectors
from apps.evaluation.models import EvalRun, Judge
from apps.projects import policy
from apps.providers import selectors as provider_selectors
from apps.registry.models import RegisteredModel
from workers.evaluation import JUDGED, METRICS
from workers.judging.rubric import KINDS, POINTWISE, SCALES


@login_required
def comparison_judges(request: HttpRequest, project_id: int, comparison_id: int) -> HttpResponse:
    """Judges of a comparison: define one, see what a run costs, launch it, watch it, read the
    results (the page's script talks to the judges API and polls a run while it is active)."""
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.view", project_id=project_id)
    project = comparison.project
    request.nav_section = "compare"
    perms = policy.permissions_on(request.user, comparison)
    local_models = RegisteredModel.objects.filter(project=project, status=RegisteredModel.Status.READY,
                                                  deleted_at__isnull=True).order_by("name")
    provider_models = provider_selectors.usable_models(project) if "provider.use" in perms else []
    return render(request, "evaluation/judges.html", {
        "project": project, "comparison": comparison, "perms": perms, "tab": "compare",
        "judges": selectors.project_judges(project), "kinds": KINDS, "scales": SCALES,
        "runs": selectors.project_runs(project).filter(comparison=comparison),
        "local_models": local_models, "provider_models": provider_models})


@login_required
def version_judges(request: HttpRequest, project_id: int) -> HttpResponse:
    """Judges over a dataset version's responses: the comparison judges page without a comparison,
    the version and its columns chosen in the launch form, and the runs over versions."""
    project = policy.get_project(request.user, project_id, "compare.view")
    request.nav_section = "compare"
    perms = policy.project_permissions(request.user, project)
    readable = policy.visible_in_project(request.user, Dataset, project, "dataset.view").filter(deleted_at__isnull=True)
    local_models = RegisteredModel.objects.filter(project=project, status=RegisteredModel.Status.READY,
                                                  deleted_at__isnull=True).order_by("name")
    provider_models = provider_selectors.usable_models(project) if "provider.use" in perms else []
    return render(request, "evaluation/judges.html", {
        "project": project, "comparison": None, "perms": perms, "tab": "compare",
        "judges": selectors.project_judges(project), "kinds": KINDS, "scales": SCALES,
        "runs": selectors.project_runs(project).filter(dataset_version__isnull=False)[:50],
        "versions": DatasetVersion.objects.filter(dataset__in=readable, status=DatasetVersion.Status.READY)
        .select_related("dataset").order_by("dataset__name", "-number"),
        "local_models": local_models, "provider_models": provider_models})


@login_required
def rate_outputs(request: HttpRequest, project_id: int, comparison_id: int) -> HttpResponse:
    """Rate the comparison's outputs blind on a pointwise judge's rubric (`?judge=`), one after the
    other: the prompt, one output and the criteria; the page's script talks to the ratings API.
    Raters need what voters need."""
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.vote", project_id=project_id)
    request.nav_section = "compare"
    judges = [j for j in Judge.objects.filter(project=comparison.project).order_by("name") if j.kind == POINTWISE]
    chosen = next((j for j in judges if str(j.pk) == request.GET.get("judge")), judges[0] if judges else None)
    return render(request, "evaluation/rate.html", {
        "project": comparison.project, "comparison": comparison, "tab": "compare", "judges": judges,
        "judge": chosen, "perms": policy.permissions_on(request.user, comparison)})


def _rows_for_people(request: HttpRequest, project_id: int, judge_id: int, version_id: int) -> tuple[Judge,
                                                                                                    DatasetVersion]:
    """The judge and the project's ready version whose rows people rate or choose on: what voters
    need, and dataset.view on the version's dataset (another project's version: 404)."""
    judge = policy.get_object(request.user, Judge, judge_id, "compare.vote", project_id=project_id)
    version = (DatasetVersion.objects.select_related("dataset")
               .filter(pk=version_id, dataset__project=judge.project, dataset__deleted_at__isnull=True,
                       status=DatasetVersion.Status.READY).first())
    if version is None:
        raise NotFound()
    policy.require(request.user, "dataset.view", version.dataset)
    request.nav_section = "compare"
    return judge, version


def _columns(request: HttpRequest, *names: str) -> dict:
    """The run's columns from the query, as the page's script sends them (the API checks them)."""
    return {name: request.GET.get(name, default)[:200] for name, default in
            (("prompt_column", "prompt"), ("response_column", "response"), ("second_response_column", ""))
            if name in names}


@login_required
def rate_rows(request: HttpRequest, project_id: int, judge_id: int, version_id: int) -> HttpResponse:
    """Rate a dataset version's responses blind on a pointwise judge's rubric, one row after the
    other, read in the columns a run of the judge read (?prompt_column=&response_column=); the
    page's script talks to the row ratings API. Raters need what voters need and dataset.view."""
    judge, version = _rows_for_people(request, project_id, judge_id, version_id)
    return render(request, "evaluation/rate.html", {
        "project": judge.project, "version": version, "tab": "compare",
        "judges": [judge] if judge.kind == POINTWISE else [], "judge": judge,
        **_columns(request, "prompt_column", "response_column"),
        "perms": policy.project_permissions(request.user, judge.project)})


@login_required
def prefer_rows(request: HttpRequest, project_id: int, judge_id: int, version_id: int) -> HttpResponse:
    """Choose blind between a dataset version's row's two responses for a pairwise judge, one row
    after the other, read in the columns a run of the judge read
    (?prompt_column=&response_column=&second_response_column=); the page's script talks to the row
    preferences API. Who may: as for rating rows."""
    judge, version = _rows_for_people(request, project_id, judge_id, version_id)
    return render(request, "evaluation/prefer.html", {
        "project": judge.project, "version": version, "tab": "compare", "judge": judge,
        **_columns(request, "prompt_column", "response_column", "second_response_column"),
        "perms": policy.project_permissions(request.user, judge.project)})


@login_required
def eval_suites(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's eval suites: create one, run it on a model, and watch its runs (the page's
    script talks to the suites API and re-renders the runs while one is active)."""
    project = policy.get_project(request.user, project_id, "compare.view")
    request.nav_section = "compare"
    perms = policy.project_permissions(request.user, project)
    runs = list(selectors.project_eval_runs(project)[:20])
    readable = policy.visible_in_project(request.user, Dataset, project, "dataset.view").filter(deleted_at__isnull=True)
    return render(request, "evaluation/suites.html", {
        "project": project, "perms": perms, "tab": "compare", "suites": selectors.project_suites(project),
        "runs": runs, "active": any(run.state in EvalRun.ACTIVE for run in runs),
        "metrics": [(name, metric) for name, metric in METRICS.items() if name not in JUDGED],
        # A pointwise judge offers each criterion of its rubric, a pairwise one the win rate against the baseline.
        "judges": [{"id": j.pk, "name": j.name, "kind": j.kind,
                    "criteria": [c["name"] for c in j.rubric.get("criteria", [])]}
                   for j in selectors.project_judges(project).order_by("name")],
        "models": policy.visible_in_project(request.user, RegisteredModel, project, "model.view").filter(
            status=RegisteredModel.Status.READY, deleted_at__isnull=True).order_by("name"),
        "versions": DatasetVersion.objects.filter(dataset__in=readable, status=DatasetVersion.Status.READY)
        .select_related("dataset").order_by("dataset__name", "-number")})
