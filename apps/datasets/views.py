from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.core.errors import Conflict, Invalid, NotFound, PermissionDenied
from apps.core.http import client_ip
from apps.core.pages import run_service
from apps.core.pagination import query_int
from apps.datasets import search_index, selectors, services
from apps.datasets.forms import DatasetForm, MappingForm, SplitForm, UploadForm
from apps.datasets.models import Dataset, DatasetVersion, DeriveJob, ImportJob
from apps.projects import policy


def _dataset_version(request, project_id: int, dataset_id: int, number: int) -> tuple[Dataset, DatasetVersion]:
    """A dataset the user may view and one of its READY versions, else 404."""
    dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", project_id=project_id)
    version = selectors.ready_versions(dataset).filter(number=number).first()
    if version is None:
        raise NotFound()
    return dataset, version


def _context(request, dataset, **extra) -> dict:
    request.nav_section = "datasets"
    return {"dataset": dataset, "project": dataset.project, "tab": "datasets",
            "perms": sorted(policy.permissions_on(request.user, dataset)),
            "is_member": policy.can(request.user, "project.view", dataset.project), **extra}


@login_required
def all_datasets(request: HttpRequest) -> HttpResponse:
    """Datasets across my projects (through a role with dataset.view) and those shared with me."""
    datasets = Dataset.objects.filter(project_id__in=policy.project_ids_with(request.user, "dataset.view")).select_related("project").order_by(
        "project__name", "name")
    shared = policy.shared_with(request.user, Dataset, "dataset.view").order_by("name")
    request.nav_section = "datasets"
    return render(request, "datasets/all.html", {"datasets": datasets, "shared": shared})


@login_required
@require_http_methods(["GET", "POST"])
def dataset_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    datasets = policy.visible_in_project(request.user, Dataset, project, "dataset.view")
    perms = policy.project_permissions(request.user, project)
    if "dataset.view" not in perms and not datasets.exists():
        raise PermissionDenied("dataset.view")
    form = DatasetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        dataset = run_service(form, lambda: services.dataset_create(
            user=request.user, project=project, ip_address=client_ip(request), **form.cleaned_data))
        if dataset:
            messages.success(request, f"Dataset “{dataset.name}” created.")
            return redirect("datasets:detail", project_id=project.pk, dataset_id=dataset.pk)
    request.nav_section = "datasets"
    return render(request, "datasets/list.html", {"project": project, "perms": perms, "tab": "datasets",
                                                  "datasets": datasets.order_by("name"), "form": form},
                  status=400 if form.errors else 200)


@login_required
def dataset_detail(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", project_id=project_id)
    return _detail(request, dataset, UploadForm())


@login_required
@require_POST
def import_upload(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    """The upload form posts here: this path gets the large upload limit (settings.UPLOAD_PATHS)."""
    dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", project_id=project_id)
    form = UploadForm(request.POST, request.FILES)
    if form.is_valid():
        job = run_service(form, lambda: services.import_create(
            user=request.user, dataset=dataset, upload=form.cleaned_data["file"], ip_address=client_ip(request)))
        if job:
            return redirect("datasets:import", project_id=dataset.project_id, dataset_id=dataset.pk, import_id=job.pk)
    return _detail(request, dataset, form)


def _detail(request, dataset, form) -> HttpResponse:
    return render(request, "datasets/detail.html", _context(
        request, dataset, form=form, versions=selectors.history(dataset),
        derive_jobs=DeriveJob.objects.filter(parent__dataset=dataset).select_related("parent", "version")[:10],
        imports=dataset.imports.select_related("version", "created_by")[:10]), status=400 if form.errors else 200)


def _job(request, project_id, dataset_id, import_id) -> ImportJob:
    dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", project_id=project_id)
    job = dataset.imports.select_related("version").filter(pk=import_id).first()
    if job is None:
        raise NotFound()
    return job


@login_required
@require_http_methods(["GET", "POST"])
def import_page(request: HttpRequest, project_id: int, dataset_id: int, import_id: int) -> HttpResponse:
    """A draft shows the preview and the column mapping; a started import shows live progress."""
    job = _job(request, project_id, dataset_id, import_id)
    preview = form = None
    if job.state == ImportJob.State.DRAFT:
        try:
            preview = services.import_preview(job=job)
        except Invalid as exc:
            messages.error(request, exc.message)
        else:
            form = MappingForm(request.POST or None, columns=preview["columns"],
                               suggested=preview["suggested_mapping"])
            if request.method == "POST" and form.is_valid():
                started = run_service(form, lambda: services.import_start(
                    user=request.user, job=job, mapping=form.mapping(), message=form.cleaned_data["message"],
                    skip_bad_rows=form.cleaned_data["skip_bad_rows"], ip_address=client_ip(request)))
                if started:
                    return redirect(request.path)
    rows = [[record.get(column) for column in preview["columns"]] for record in preview["records"]] if preview else []
    return render(request, "datasets/import.html", _context(request, job.dataset, job=job, preview=preview,
                                                            preview_rows=rows, form=form),
                  status=400 if form is not None and form.errors else 200)


@login_required
@require_POST
def import_cancel(request: HttpRequest, project_id: int, dataset_id: int, import_id: int) -> HttpResponse:
    job = _job(request, project_id, dataset_id, import_id)
    was_draft = job.state == job.State.DRAFT
    try:
        services.import_cancel(user=request.user, job=job, ip_address=client_ip(request))
    except Conflict as exc:
        messages.error(request, exc.message)
    else:
        if was_draft:  # an upload never started: back to the dataset
            messages.success(request, f"Upload “{job.filename}” discarded; nothing was imported.")
            return redirect("datasets:detail", project_id=project_id, dataset_id=dataset_id)
    return redirect("datasets:import", project_id=project_id, dataset_id=dataset_id, import_id=import_id)


@login_required
def version_page(request: HttpRequest, project_id: int, dataset_id: int, number: int) -> HttpResponse:
    """Browse one version: search, filter by label, keyset pages."""
    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    try:
        after = query_int(request.GET, "after", default=None)
    except Invalid:  # a hand-edited address starts from the top
        after = None
    q = request.GET.get("q", "")[:500]
    label = request.GET.get("label", "")[:200]
    split = request.GET.get("split", "")[:16]
    meta_key, meta_value = request.GET.get("meta_key", ""), request.GET.get("meta_value", "")[:1000]
    meta_keys = version.schema.get("metadata_keys", [])
    meta = (meta_key, meta_value) if meta_key in meta_keys else None
    # One read of the jobs: a job finishing between two reads would show neither its result nor its progress.
    jobs = list(DeriveJob.objects.filter(parent=version).select_related("version"))  # newest first
    pii_scan = next((job for job in jobs if job.kind == DeriveJob.Kind.PII_SCAN), None)
    # The job this page was opened to follow (?job=, after an edit or a split) stays shown once it
    # ended, with its new version; a fast worker may end it before the page is even drawn.
    followed = request.GET.get("job", "")
    active_jobs = [job for job in reversed(jobs) if job.state in ImportJob.ACTIVE or str(job.pk) == followed]
    export_jobs = version.exports.all()[:10] if "dataset.export" in policy.permissions_on(request.user, dataset) \
        else []
    from apps.annotation.selectors import annotation_filter
    from apps.evaluation.selectors import teacher_panel

    annotation = request.GET.get("annotation", "")[:40]
    campaigns, rows_in = annotation_filter(request.user, version, annotation)
    try:
        rows, next_after = selectors.version_rows(version=version, after=after, q=q, label=label, split=split,
                                                  meta=meta, rows_in=rows_in)
        search_error = ""
    except Invalid as exc:  # a search over a version whose index is not built yet took too long
        rows, next_after, search_error = [], None, exc.message
    return render(request, "datasets/version.html", _context(request, dataset, version=version, rows=rows,
                                                             search_error=search_error,
                                                             search_indexed=search_index.is_indexed(version),
                                                             next_after=next_after, q=q, label=label, split=split,
                                                             split_form=SplitForm(), pii_scan=pii_scan,
                                                             active_jobs=active_jobs, meta_keys=meta_keys,
                                                             version_kinds=[kind for kind in DeriveJob.Kind.values
                                                                            if kind not in DeriveJob.REPORT_KINDS],
                                                             export_jobs=export_jobs, campaigns=campaigns,
                                                             annotation=annotation if rows_in else "",
                                                             meta_key=meta_key if meta else "",
                                                             meta_value=meta_value if meta else "",
                                                             split_counts=_split_counts(version),
                                                             teacher=teacher_panel(request.user, version)))


def _split_counts(version) -> list[tuple[str, int]]:
    """Rows per split, train, validation, test first, then the others a file named (JSON objects
    come back in the database's key order)."""
    from workers.ingest.splits import SPLIT_NAMES

    counts = (version.schema.get("splits") or {}).get("counts") or version.stats.get("splits") or {}
    return sorted(counts.items(), key=lambda item: (SPLIT_NAMES.index(item[0]) if item[0] in SPLIT_NAMES
                                                    else len(SPLIT_NAMES), item[0]))


@login_required
@require_http_methods(["GET", "POST"])
def version_stats(request: HttpRequest, project_id: int, dataset_id: int, number: int) -> HttpResponse:
    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    from apps.registry.models import RegisteredModel

    if request.method == "POST":
        try:
            services.version_token_stats_start(user=request.user, version=version,
                                               model_id=request.POST.get("model", ""), ip_address=client_ip(request))
            messages.success(request, "Counting tokens: the histograms appear here when the worker is done.")
        except Invalid as exc:
            messages.error(request, exc.message)
        return redirect("datasets:stats", project_id=project_id, dataset_id=dataset_id, number=number)
    # One read of the jobs: a job finishing between two reads would show neither its result nor its progress.
    token_jobs = list(DeriveJob.objects.filter(parent=version, kind=DeriveJob.Kind.TOKEN_STATS))  # newest first
    token_stats = next((job for job in token_jobs if job.state == DeriveJob.State.SUCCEEDED), None)
    models = policy.visible_in_project(request.user, RegisteredModel, dataset.project, "model.view").filter(
        status=RegisteredModel.Status.READY, kind=RegisteredModel.Kind.BASE).order_by("name")
    return render(request, "datasets/stats.html", _context(
        request, dataset, version=version, stats=version.stats, models=models,
        token_stats=token_stats.result if token_stats else None,
        token_failure=next((job for job in token_jobs if job.state not in ImportJob.ACTIVE), None)
        if not token_stats else None,
        active_jobs=[job for job in token_jobs if job.state in ImportJob.ACTIVE]))


DIFF_TITLES = {"changed": "Changed", "added": "Added", "removed": "Removed", "moved": "Moved between splits"}


@login_required
def version_diff(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    """Compare any two versions: the counts of rows added, removed, changed and moved between
    splits, with the first few of each; `show=<kind>` pages through one kind (`after`: the
    position the page starts after)."""
    dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", project_id=project_id)
    versions = list(selectors.ready_versions(dataset))
    by_number = {v.number: v for v in versions}
    try:
        old = by_number.get(int(request.GET.get("old", "")))
        new = by_number.get(int(request.GET.get("new", "")))
    except ValueError:
        old = new = None
    if old is None or new is None:
        if len(versions) < 2:
            messages.error(request, "A diff needs two versions.")
            return redirect("datasets:detail", project_id=project_id, dataset_id=dataset_id)
        new, old = versions[0], versions[1]
    kind = request.GET.get("show", "")
    if kind in selectors.DIFF_KINDS:
        try:
            # Clamped to the range of a position: a cursor past it is past every row.
            after = min(max(int(request.GET["after"]), -1), 2**31 - 1) if request.GET.get("after") else None
        except ValueError:
            after = None  # a cursor that is no position: the first page
        diff = selectors.version_diff_page(old=old, new=new, kind=kind, after=after)
        return render(request, "datasets/diff.html", _context(
            request, dataset, versions=versions, diff=diff, kind_title=DIFF_TITLES[kind], kind_count=diff[kind]))
    diff = selectors.version_diff(old=old, new=new)
    overview = [(kind, DIFF_TITLES[kind], diff[kind], diff[f"{kind}_examples"]) for kind in selectors.DIFF_KINDS]
    return render(request, "datasets/diff.html", _context(request, dataset, versions=versions, diff=diff,
                                                          overview=overview))


@login_required
@require_POST
def version_purge(request: HttpRequest, project_id: int, dataset_id: int, number: int) -> HttpResponse:
    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    try:
        services.version_purge_start(user=request.user, version=version, ip_address=client_ip(request))
    except Conflict as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Purging v{version.number}: its rows are being deleted for good.")
    return redirect("datasets:detail", project_id=project_id, dataset_id=dataset_id)


@login_required
@require_POST
def version_split(request: HttpRequest, project_id: int, dataset_id: int, number: int) -> HttpResponse:
    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    form = SplitForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items()))
    else:
        data = form.cleaned_data
        ratios = {name: data[name] for name in ("train", "validation", "test") if data[name]}
        try:
            job = services.version_split_start(user=request.user, version=version, ratios=ratios, seed=data["seed"],
                                               stratify=data["stratify"], ip_address=client_ip(request))
        except Invalid as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Splitting v{version.number} into a new version; it appears below when done.")
            return _follow(project_id, dataset_id, number, job)
    return redirect("datasets:version", project_id=project_id, dataset_id=dataset_id, number=number)


def _follow(project_id: int, dataset_id: int, number: int, job) -> HttpResponse:
    """The version page, following `job` live until its new version is there."""
    return redirect(reverse("datasets:version", kwargs={"project_id": project_id, "dataset_id": dataset_id,
                                                        "number": number}) + f"?job={job.pk}#derive-jobs")


@login_required
@require_POST
def version_pii(request: HttpRequest, project_id: int, dataset_id: int, number: int, action: str) -> HttpResponse:
    """Start a PII scan of a version, or a redacted copy of it."""
    if action not in ("scan", "redact"):
        raise NotFound()
    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    if action == "scan":
        services.version_pii_scan_start(user=request.user, version=version, ip_address=client_ip(request))
        messages.success(request, "PII scan started; refresh to see the report.")
        return redirect("datasets:version", project_id=project_id, dataset_id=dataset_id, number=number)
    services.version_redact_start(user=request.user, version=version, ip_address=client_ip(request))
    messages.success(request, f"Redacting v{version.number} into a new version; it appears below when done.")
    return redirect("datasets:detail", project_id=project_id, dataset_id=dataset_id)


EDIT_FIELDS = ("prompt", "response", "reference", "label")


@login_required
@require_http_methods(["GET", "POST"])
def row_page(request: HttpRequest, project_id: int, dataset_id: int, number: int, position: int) -> HttpResponse:
    """One row: chat turns and Markdown rendered safely, its metadata; fix it or drop it (each a new
    version, written by a worker)."""
    from apps.core.rendering import render_markdown

    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    row = version.rows.filter(position=position).first()
    if row is None:
        raise NotFound()
    if request.method == "POST":
        if request.POST.get("action") == "drop":
            edits, drops = {}, [position]
        else:
            changes = {field: request.POST.get(field, "") or None for field in EDIT_FIELDS if field in request.POST}
            changes = {field: value for field, value in changes.items() if value != getattr(row, field)}
            edits, drops = ({position: changes} if changes else {}), []
        try:
            job = services.version_edit_start(user=request.user, version=version, edits=edits, drops=drops,
                                              message=request.POST.get("message", "")[:500],
                                              ip_address=client_ip(request))
        except Invalid as exc:
            messages.error(request, exc.message)
            return redirect("datasets:row", project_id=project_id, dataset_id=dataset_id, number=number,
                            position=position)
        messages.success(request, "Writing the new version: it appears on this page when it is done.")
        return _follow(project_id, dataset_id, number, job)
    rendered = {field: render_markdown(getattr(row, field)) for field in ("prompt", "response", "reference")
                if getattr(row, field) is not None}
    turns = [{"role": turn.get("role"), "html": render_markdown(turn.get("content"))}
             for turn in row.messages or [] if isinstance(turn, dict)]
    return render(request, "datasets/row.html", _context(request, dataset, version=version, row=row,
                                                         rendered=rendered, turns=turns))


@login_required
@require_POST
def version_export_job(request: HttpRequest, project_id: int, dataset_id: int, number: int) -> HttpResponse:
    dataset, version = _dataset_version(request, project_id, dataset_id, number)
    try:
        services.export_start(user=request.user, version=version, export_format=request.POST.get("format", ""),
                              ip_address=client_ip(request))
        messages.success(request, "Export queued: its download link appears below when the file is written.")
    except Invalid as exc:
        messages.error(request, exc.message)
    return redirect("datasets:version", project_id=project_id, dataset_id=dataset_id, number=number)
