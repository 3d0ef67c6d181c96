from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.comparison import events, selectors, services
from apps.comparison.forms import CreateForm
from apps.comparison.models import Comparison
from apps.core.errors import Conflict, Invalid, NotFound, PermissionDenied, QuotaExceeded
from apps.core.http import client_ip
from apps.datasets.models import Dataset, DatasetVersion
from apps.evaluation.selectors import judge_boards
from apps.projects import policy
from apps.providers.selectors import usable_models
from apps.registry.models import RegisteredModel

SEE = ("compare.view", "compare.vote")  # voters (annotators) see the list to reach the vote pages


def _project_for_list(request: HttpRequest, project_id: int):
    project = policy.get_project(request.user, project_id)
    perms = policy.project_permissions(request.user, project)
    if not any(p in perms for p in SEE):
        raise PermissionDenied("compare.view")
    return project, perms


@login_required
def all_comparisons(request: HttpRequest) -> HttpResponse:
    """Comparisons across my projects (through a role with compare.view or compare.vote)."""
    request.nav_section = "compare"
    ids = set(policy.project_ids_with(request.user, "compare.view")) | set(
        policy.project_ids_with(request.user, "compare.vote"))
    comparisons = Comparison.objects.filter(project_id__in=ids).select_related("project", "created_by")[:200]
    return render(request, "comparison/all.html", {"comparisons": comparisons})


@login_required
def comparison_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project, perms = _project_for_list(request, project_id)
    request.nav_section = "compare"
    comparisons = Comparison.objects.filter(project=project).select_related("created_by")[:200]
    return render(request, "comparison/list.html", {"project": project, "perms": perms, "tab": "compare",
                                                    "comparisons": comparisons})


@login_required
@require_http_methods(["GET", "POST"])
def comparison_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "compare.run")
    models = (policy.visible_in_project(request.user, RegisteredModel, project, "model.view")
              .filter(status=RegisteredModel.Status.READY).select_related("base_model").order_by("name"))
    datasets = policy.visible_in_project(request.user, Dataset, project, "dataset.view")
    versions = (DatasetVersion.objects.filter(dataset__in=datasets, status=DatasetVersion.Status.READY)
                .select_related("dataset").order_by("dataset__name", "-number"))
    initial = {}
    if request.GET.get("model"):
        initial["model_2"] = request.GET["model"]
    provider_models = (usable_models(project) if "provider.use" in policy.project_permissions(request.user, project)
                       else [])
    form = CreateForm(request.POST or None, models=models, versions=versions, provider_models=provider_models,
                      initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            comparison = services.comparison_create(user=request.user, project=project, ip_address=client_ip(request),
                                                    **form.create_arguments())
        except (Invalid, Conflict, QuotaExceeded) as exc:
            form.add_error(form.field_for(exc.field), exc.message)
        else:
            messages.success(request, f"Comparison “{comparison.name}” queued.")
            return redirect("comparison:detail", project_id=project.pk, comparison_id=comparison.pk)
    request.nav_section = "compare"
    return render(request, "comparison/create.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "compare",
        "form": form}, status=400 if form.errors else 200)


@login_required
def comparison_detail(request: HttpRequest, project_id: int, comparison_id: int) -> HttpResponse:
    """The grid: prompts as rows, models as columns; it fills live while the comparison runs."""
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.view", project_id=project_id)
    request.nav_section = "compare"
    contestants = selectors.contestants(comparison)
    summaries = {s["contestant"]: s for s in selectors.model_summaries(comparison)}
    prompts = list(comparison.prompts.order_by("position"))
    return render(request, "comparison/detail.html", {
        "project": comparison.project, "perms": policy.permissions_on(request.user, comparison), "tab": "compare",
        "comparison": comparison, "contestants": [(c, summaries.get(c.pk)) for c in contestants],
        "prompts": prompts, "has_references": any(p.reference for p in prompts),
        "state": events.state_payload(comparison), "params_text": _params_text(comparison.params),
        "grid_meta": {"contestants": [selectors.contestant_payload(c) for c in contestants]},
        "datasets": policy.visible_in_project(request.user, Dataset, comparison.project, "dataset.view")})


def _params_text(params: dict) -> str:
    """"max_new_tokens 128, greedy" or "..., temperature 0.7, top_p 0.9, seed 3": what differs from the defaults."""
    parts = [f"max_new_tokens {params.get('max_new_tokens')}"]
    if not params.get("temperature"):
        parts.append("greedy")
    else:
        parts.append(f"temperature {params['temperature']}")
        parts += [f"{key} {params[key]}" for key, default in (("top_p", 1.0), ("top_k", 0))
                  if params.get(key, default) != default]
        if params.get("seed") is not None:
            parts.append(f"seed {params['seed']}")
    if params.get("stop"):
        parts.append("stop " + ", ".join(repr(s) for s in params["stop"]))
    return ", ".join(parts)


@login_required
def comparison_vote(request: HttpRequest, project_id: int, comparison_id: int) -> HttpResponse:
    """Blind voting: the page asks the API for pairs and sends votes; no model name is in it."""
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.vote", project_id=project_id)
    request.nav_section = "compare"
    return render(request, "comparison/vote.html", {
        "project": comparison.project, "perms": policy.permissions_on(request.user, comparison), "tab": "compare",
        "comparison": comparison})


@login_required
def comparison_leaderboard(request: HttpRequest, project_id: int, comparison_id: int) -> HttpResponse:
    """The people's leaderboard from the blind votes, and apart from it each judge's (its verdicts
    counted as votes), with its agreement with the people and whether it is calibrated."""
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.view", project_id=project_id)
    request.nav_section = "compare"
    return render(request, "comparison/leaderboard.html", {
        "project": comparison.project, "perms": policy.permissions_on(request.user, comparison), "tab": "compare",
        "comparison": comparison, "board": selectors.comparison_leaderboard(comparison),
        "judge_boards": judge_boards(comparison)})


@login_required
def project_leaderboard(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "compare.view")
    request.nav_section = "compare"
    return render(request, "comparison/leaderboard.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "compare",
        "comparison": None, "board": selectors.project_leaderboard(project)})


@login_required
@require_POST
def comparison_action(request: HttpRequest, project_id: int, comparison_id: int, action: str) -> HttpResponse:
    if action not in ("cancel", "delete", "export"):
        raise NotFound()
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.view", project_id=project_id)
    ip = client_ip(request)
    try:
        if action == "cancel":
            services.comparison_cancel(user=request.user, comparison=comparison, ip_address=ip)
            messages.success(request, "Cancel requested: the comparison stops after its current batch.")
        elif action == "delete":
            services.comparison_delete(user=request.user, comparison=comparison, ip_address=ip)
            messages.success(request, f"Comparison “{comparison.name}” deleted.")
            return redirect("comparison:list", project_id=project_id)
        else:
            dataset = request.POST.get("dataset") or None
            version = services.votes_export(user=request.user, comparison=comparison, ip_address=ip,
                                            dataset=int(dataset) if dataset and dataset.isdigit() else None,
                                            dataset_name=request.POST.get("dataset_name", ""))
            messages.success(request, f"Exported {version.row_count} votes as {version}.")
            return redirect("datasets:version", project_id=project_id, dataset_id=version.dataset_id,
                            number=version.number)
    except (Invalid, Conflict) as exc:
        messages.error(request, exc.message)
    return redirect("comparison:detail", project_id=project_id, comparison_id=comparison.pk)
