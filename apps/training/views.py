from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.core.errors import Conflict, Invalid, NotFound, PermissionDenied
from apps.core.http import client_ip
from apps.datasets.models import Dataset, DatasetVersion
from apps.evaluation import selectors as eval_selectors
from apps.projects import policy
from apps.registry.models import RegisteredModel
from apps.training import events, selectors, services
from apps.training.capacity import waiting_reason
from apps.training.forms import LaunchForm
from apps.training.models import Sweep, TrainingJob


@login_required
def all_jobs(request: HttpRequest) -> HttpResponse:
    """Jobs across my projects (through a role with job.view)."""
    request.nav_section = "jobs"
    jobs = (TrainingJob.objects.filter(project_id__in=policy.project_ids_with(request.user, "job.view"))
            .select_related("project", "base_model", "dataset_version__dataset", "created_by")[:200])
    return render(request, "training/all.html", {"jobs": jobs})


@login_required
def job_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "job.view")
    request.nav_section = "jobs"
    jobs = (TrainingJob.objects.filter(project=project)
            .select_related("base_model", "dataset_version__dataset", "created_by")[:200])
    return render(request, "training/list.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "jobs", "jobs": jobs})


@login_required
def job_compare(request: HttpRequest, project_id: int) -> HttpResponse:
    """Overlay runs of a project on one chart, their configs side by side, differences marked."""
    project = policy.get_project(request.user, project_id, "job.view")
    ids = [part for part in request.GET.getlist("jobs") if part.strip()][:selectors.MAX_COMPARED_JOBS]
    jobs = [policy.get_object(request.user, TrainingJob, pk, "job.view", project_id=project.pk) for pk in ids]
    metric = request.GET.get("metric", "loss")
    x_axis = request.GET.get("x", "step")
    if metric not in selectors.COMPARE_METRICS:
        metric = "loss"
    if x_axis not in selectors.COMPARE_AXES:
        x_axis = "step"
    request.nav_section = "jobs"
    return render(request, "training/compare.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "jobs", "jobs": jobs,
        "metric": metric, "x_axis": x_axis, "metrics": selectors.COMPARE_METRICS, "axes": selectors.COMPARE_AXES,
        "chart": {"series": selectors.compare_series(jobs, metric=metric, x_axis=x_axis),
                  "x_title": selectors.COMPARE_AXES[x_axis], "y_title": selectors.COMPARE_METRICS[metric][1]},
        "config_rows": selectors.config_table(jobs) if jobs else []})


@login_required
@require_http_methods(["GET", "POST"])
def job_launch(request: HttpRequest, project_id: int) -> HttpResponse:
    """The launch form. "Estimate" checks everything and shows memory, steps and time; "Launch"
    queues the job. `?from=<job>` prefills an edited copy of an earlier job."""
    from workers.training import TrainConfig

    project = policy.get_project(request.user, project_id, "job.launch")
    models = policy.visible_in_project(request.user, RegisteredModel, project, "model.view").filter(
        kind=RegisteredModel.Kind.BASE, status=RegisteredModel.Status.READY).order_by("name")
    datasets = policy.visible_in_project(request.user, Dataset, project, "dataset.view")
    versions = (DatasetVersion.objects.filter(dataset__in=datasets, status=DatasetVersion.Status.READY)
                .select_related("dataset").order_by("dataset__name", "-number"))
    source = None
    if request.GET.get("from"):
        source = policy.get_object(request.user, TrainingJob, request.GET["from"], "job.view", project_id=project.pk)
        initial = LaunchForm.initial_from(source.config, name=f"{source.name} (copy)"[:120],
                                          base_model=source.base_model_id, dataset_version=source.dataset_version_id,
                                          train_split=source.train_split, eval_split=source.eval_split)
    else:
        initial = LaunchForm.initial_from(TrainConfig().as_dict(), train_split="train", eval_split="validation")
    form = LaunchForm(request.POST or None, initial=initial, models=models, versions=versions)
    estimate = None
    if request.method == "POST" and form.is_valid():
        arguments = form.launch_arguments()
        try:
            if request.POST.get("action") == "estimate":
                estimate = services.job_estimate(user=request.user, project=project, **arguments)
            else:
                job, _ = services.job_launch(user=request.user, project=project, ip_address=client_ip(request),
                                             parent=source, **arguments)
                messages.success(request, f"Job “{job.name}” queued.")
                return redirect("training:detail", project_id=project.pk, job_id=job.pk)
        except (Invalid, Conflict, PermissionDenied, services.QuotaExceeded, services.BudgetExceeded) as exc:
            form.add_error(form.field_for(exc.field), exc.message)
    request.nav_section = "jobs"
    return render(request, "training/launch.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "jobs", "form": form,
        "estimate": estimate, "source": source}, status=400 if form.errors else 200)


@login_required
def job_detail(request: HttpRequest, project_id: int, job_id: int) -> HttpResponse:
    job = policy.get_object(request.user, TrainingJob, job_id, "job.view", project_id=project_id)
    request.nav_section = "jobs"
    perms = policy.permissions_on(request.user, job)
    eval_points = list(selectors.job_points(job, kind="eval"))
    return render(request, "training/detail.html", {
        "project": job.project, "perms": perms, "tab": "jobs", "job": job, "state": events.state_payload(job),
        "queue_position": selectors.queue_position(job), "waiting_reason": waiting_reason(job), "config": sorted(job.config.items()),
        "latest_samples": eval_points[-1].values.get("samples", []) if eval_points else [],
        "eval_results": eval_selectors.job_eval_results(job.pk) if "compare.view" in perms else None,
        "samples_step": eval_points[-1].step if eval_points else None})


@login_required
@require_POST
def job_action(request: HttpRequest, project_id: int, job_id: int, action: str) -> HttpResponse:
    if action not in ("cancel", "resume", "reproduce", "compare"):
        raise NotFound()
    job = policy.get_object(request.user, TrainingJob, job_id, "job.view", project_id=project_id)
    ip = client_ip(request)
    try:
        if action == "cancel":
            services.job_cancel(user=request.user, job=job, ip_address=ip)
            messages.success(request, "Cancel requested: the job stops before its next step.")
        elif action == "resume":
            services.job_resume(user=request.user, job=job, ip_address=ip)
            messages.success(request, "Job queued again; it resumes from its last checkpoint.")
        elif action == "reproduce":
            copy = services.job_copy(user=request.user, job=job, name=f"{job.name} (reproduce)"[:120], ip_address=ip)
            messages.success(request, f"Job “{copy.name}” queued with the same inputs and config.")
            return redirect("training:detail", project_id=project_id, job_id=copy.pk)
        elif action == "compare":
            from apps.comparison.services import compare_with_base

            comparison = compare_with_base(user=request.user, job=job, ip_address=ip)
            messages.success(request, f"Comparing the adapter with its base on {comparison.cells_total // 2} "
                                      "prompts of the job's evaluation data.")
            return redirect("comparison:detail", project_id=project_id, comparison_id=comparison.pk)
    except (Invalid, Conflict, services.QuotaExceeded) as exc:
        messages.error(request, exc.message)
    return redirect("training:detail", project_id=project_id, job_id=job.pk)


@login_required
def sweep_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "job.view")
    request.nav_section = "jobs"
    sweeps = [(sweep, selectors.sweep_state(sweep)) for sweep in
              Sweep.objects.filter(project=project).select_related("created_by", "base_model")[:200]]
    return render(request, "training/sweeps.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "jobs",
        "sweeps": sweeps})


@login_required
def sweep_detail(request: HttpRequest, project_id: int, sweep_id: int) -> HttpResponse:
    """The sweep's jobs ranked by its objective (eval loss, or a classifier's macro-F1): a
    parallel-coordinates chart of the swept values against it, the table, and the best run one click
    from a comparison with its base."""
    sweep = policy.get_object(request.user, Sweep, sweep_id, "job.view", project_id=project_id,
                              related=("base_model", "dataset_version__dataset"))
    request.nav_section = "jobs"
    trials = selectors.sweep_trials(sweep)
    ranked = [t for t in trials if t["rank"]]
    best = ranked[0] if ranked else None
    metric = selectors.sweep_objective(sweep)
    label, higher_is_better = selectors.SWEEP_OBJECTIVES[metric]
    objective = {"metric": metric, "label": label, "higher_is_better": higher_is_better}
    return render(request, "training/sweep.html", {
        "project": sweep.project, "perms": policy.permissions_on(request.user, sweep), "tab": "jobs",
        "sweep": sweep, "state": selectors.sweep_state(sweep), "options": list(sweep.space), "trials": trials,
        "best": best, "best_job": TrainingJob.objects.filter(pk=best["job"]).first() if best else None,
        "top_jobs": [t["job"] for t in ranked[:selectors.MAX_COMPARED_JOBS]],
        "objective": objective, "chart": {"options": list(sweep.space), "trials": trials, "objective": objective}})


@login_required
@require_POST
def sweep_cancel(request: HttpRequest, project_id: int, sweep_id: int) -> HttpResponse:
    sweep = policy.get_object(request.user, Sweep, sweep_id, "job.view", project_id=project_id)
    try:
        services.sweep_cancel(user=request.user, sweep=sweep, ip_address=client_ip(request))
        messages.success(request, "Sweep cancelled: its queued jobs ended, its running ones stop at their next step.")
    except Conflict as exc:
        messages.error(request, exc.message)
    return redirect("training:sweep", project_id=project_id, sweep_id=sweep.pk)
