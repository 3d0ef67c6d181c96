from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.core.errors import Conflict, DomainError, Invalid, NotFound
from apps.core.http import client_ip
from apps.core.pages import run_service
from apps.evaluation import selectors as eval_selectors
from apps.projects import policy
from apps.registry import precisions, selectors, services
from apps.registry.models import CatalogueModel, ModelAlias, ModelExport, RegisteredModel, ServingPrecision
from apps.serving import selectors as serving_selectors


class RegisterForm(forms.Form):
    name = forms.CharField(max_length=120)
    path = forms.CharField(max_length=1000, required=False, help_text="A safetensors directory or a .gguf file "
                                                                      "inside the model roots of this server.",
                           widget=forms.TextInput(attrs={"list": "model-root-entries", "autocomplete": "off"}))
    hub_id = forms.CharField(max_length=200, required=False, label="Or a Hugging Face id",
                             help_text="org/name, from this server's local Hugging Face cache.")


class EstimateForm(forms.Form):
    mode = forms.ChoiceField(choices=[("inference", "inference"), ("lora", "LoRA training")])
    precision = forms.ChoiceField(choices=[("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32")])
    batch_size = forms.IntegerField(min_value=1, max_value=4096, initial=8)
    seq_len = forms.IntegerField(min_value=1, max_value=1_000_000, initial=512, label="Sequence length")
    lora_rank = forms.IntegerField(min_value=1, max_value=1024, initial=16, label="LoRA rank")


class CatalogueForm(RegisterForm):
    default_enabled = forms.BooleanField(required=False, label="Enabled in every new project",
                                         help_text="New projects start with it (the demo model is).")


@login_required
@require_http_methods(["GET", "POST"])
def all_models(request: HttpRequest) -> HttpResponse:
    """Models across my projects (through a role with model.view); for site admins, the site's
    catalogue too, where they register a base model once for every project."""
    staff = request.user.is_active and request.user.is_staff
    form = CatalogueForm(request.POST or None) if staff else None
    if request.method == "POST":
        services.require_site_staff(request.user)
        if form.is_valid():
            entry = run_service(form, lambda: services.catalogue_register(
                user=request.user, ip_address=client_ip(request), **form.cleaned_data))
            if entry:
                messages.success(request, f"“{entry.name}” is in the catalogue: a worker is checking its files.")
                return redirect("registry:all")
    return _all_models_page(request, form=form, upload_form=CatalogueUploadForm() if staff else None)


def _all_models_page(request: HttpRequest, *, form, upload_form) -> HttpResponse:
    request.nav_section = "models"
    project_ids = policy.project_ids_with(request.user, "model.view")
    staff = request.user.is_active and request.user.is_staff
    failed = any(f is not None and f.is_bound and f.errors for f in (form, upload_form))
    return render(request, "registry/all.html", {
        "models": RegisteredModel.objects.filter(project_id__in=project_ids).select_related("project")
        .order_by("project__name", "name"),
        "catalogue": CatalogueModel.objects.order_by("name") if staff else None, "form": form,
        "upload_form": upload_form, "root_entries": selectors.model_root_entries() if staff else []},
        status=400 if failed else 200)


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class CatalogueUploadForm(forms.Form):
    name = forms.CharField(max_length=120)
    files = forms.Field(required=False, widget=MultipleFileInput, help_text=(
        ".safetensors weights with config.json and the tokenizer files, or one .gguf file. Pickle files "
        "(.bin, .pt) are refused."))
    default_enabled = forms.BooleanField(required=False, label="Enabled in every new project")

    def __init__(self, *args, **kwargs) -> None:
        # Its own ids: the page's register form has a name field and a default_enabled box too.
        super().__init__(*args, auto_id="upload_%s", **kwargs)


@login_required
@require_POST
def catalogue_upload(request: HttpRequest) -> HttpResponse:
    """A site admin uploads a base model's files into the catalogue (apps.registry.uploads)."""
    services.require_site_staff(request.user)
    form = CatalogueUploadForm(request.POST, request.FILES)
    if form.is_valid():
        entry = run_service(form, lambda: services.catalogue_upload(
            user=request.user, name=form.cleaned_data["name"], files=request.FILES.getlist("files"),
            default_enabled=form.cleaned_data["default_enabled"], ip_address=client_ip(request)))
        if entry:
            messages.success(request, f"“{entry.name}” is uploaded: a worker checks and loads it.")
            return redirect("registry:all")
    return _all_models_page(request, form=CatalogueForm(), upload_form=form)


@login_required
@require_POST
def catalogue_entry(request: HttpRequest, entry_id: int) -> HttpResponse:
    """A site admin deletes a catalogue model (refused, with the projects that use it, while any
    does) or marks it enabled, or not, in every new project."""
    services.require_site_staff(request.user)
    entry = CatalogueModel.objects.filter(pk=entry_id).first()
    if entry is None:
        raise NotFound()
    action = request.POST.get("action")
    try:
        if action == "delete":
            services.catalogue_delete(user=request.user, entry=entry, ip_address=client_ip(request))
            messages.success(request, f"“{entry.name}” is deleted from the catalogue.")
        elif action in ("default", "not-default"):
            services.catalogue_update(user=request.user, entry=entry, default_enabled=action == "default",
                                      ip_address=client_ip(request))
            messages.success(request, f"“{entry.name}” is {'' if entry.default_enabled else 'no longer '}"
                                      "enabled in every new project.")
        else:
            raise Invalid("Choose delete, default or not-default.", field="action")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("registry:all")


@login_required
@require_http_methods(["GET", "POST"])
def model_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "model.view")
    form = RegisterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        model = run_service(form, lambda: services.model_register(
            user=request.user, project=project, ip_address=client_ip(request), **form.cleaned_data))
        if model:
            messages.success(request, f"Model “{model.name}” registered: a worker is checking its files.")
            return redirect("registry:detail", project_id=project.pk, model_id=model.pk)
    request.nav_section = "models"
    return render(request, "registry/list.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "models",
        "models": policy.visible_in_project(request.user, RegisteredModel, project, "model.view").order_by("name"),
        "form": form, "root_entries": selectors.model_root_entries(),
        "catalogue": selectors.catalogue_for_project(project)}, status=400 if form.errors else 200)


@login_required
def model_detail(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    form = EstimateForm(request.GET or None, initial={"mode": "lora", "precision": "bf16"})
    estimate = None
    if form.is_valid():
        try:
            estimate = services.model_memory_estimate(model=model, **form.cleaned_data)
        except Invalid as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
    request.nav_section = "models"
    lineage = model.lineage or {}
    config = lineage.get("config") or {}
    # An adapter's own facts, from its adapter_config.json (stored at registration), else its config.
    adapter = {"peft_type": "LORA", "r": config.get("lora_r"), "lora_alpha": config.get("lora_alpha"),
               "target_modules": config.get("target_modules"), **(lineage.get("adapter") or {})}
    if isinstance(adapter["target_modules"], list):
        adapter["target_modules"] = ", ".join(adapter["target_modules"])
    perms = policy.project_permissions(request.user, model.project)
    # Aliases: this model's own (it is the name clients ask for), and those pointing at it as a version.
    head = model.base_model if model.kind == RegisteredModel.Kind.ADAPTER and model.base_model_id else model
    measurement = model.precision_measurements.first()  # the latest, whatever its state
    aliases = list(model.aliases.select_related("version", "canary_version", "updated_by", "quality_judge")
                   .order_by("name"))
    for alias in aliases:
        alias.health = serving_selectors.alias_canary_health(alias)
    return render(request, "registry/detail.html", {
        "aliases": aliases,
        "quality_judges": [(judge, eval_selectors.judge_calibration(judge)) for judge in
                           eval_selectors.project_judges(model.project).filter(rubric__kind="pointwise")]
        if {"model.alias", "compare.run"} <= perms else [],
        "aliased_as": ModelAlias.objects.filter(version=model).select_related("model").order_by("name"),
        "shares": adapter_shares_for(request.user, model, perms), "share_targets": share_targets(request.user, model, perms),
        "alias_head": head, "head_aliases": head.aliases.order_by("name") if head != model else [],
        "alias_versions": services.alias_versions(model).filter(status=RegisteredModel.Status.READY)
        .order_by("kind", "name") if "model.alias" in perms else [],
        "eval_results": eval_selectors.model_eval_results(model.pk) if "compare.view" in perms else None,
        "project": model.project, "model": model, "info": model.info, "form": form, "estimate": estimate,
        "perms": perms, "tab": "models",
        "can_download": model.kind == RegisteredModel.Kind.ADAPTER and policy.can(request.user, "model.download", model),
        "exports": model.exports.all()[:10] if policy.can(request.user, "model.download", model) else None,
        "export_formats": ModelExport.Format.choices, "export_ended_states": ModelExport.ENDED,
        "serving_precisions": ServingPrecision.choices, "serving_precision": selectors.serving_precision(model),
        "measurement": measurement, "precision_rows": selectors.precision_table(measurement.results) if measurement else [],
        "measured": selectors.latest_precision_measurement(model),
        "lineage": lineage, "adapter": adapter, "config": sorted(config.items()),
        "metrics": sorted((lineage.get("metrics") or {}).items())})


@login_required
@require_POST
def model_export(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    try:
        job = services.model_export_start(user=request.user, model=model, export_format=request.POST.get("format", ""),
                                          ip_address=client_ip(request))
    except Invalid as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Exporting as {job.get_format_display()}: a worker writes the file, then loads it "
                                  "back to check it.")
    return redirect("registry:detail", project_id=project_id, model_id=model.pk)


@login_required
@require_POST
def model_export_delete(request: HttpRequest, project_id: int, model_id: int, export_id: int) -> HttpResponse:
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    export = model.exports.filter(pk=export_id).first()
    if export is None:
        raise NotFound()
    try:
        services.model_export_delete(user=request.user, export=export, ip_address=client_ip(request))
    except Conflict as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Deleted the {export.get_format_display()} export and its file.")
    return redirect("registry:detail", project_id=project_id, model_id=model.pk)


@login_required
@require_POST
def serving_precision(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    try:
        precisions.serving_precision_set(user=request.user, model=model, precision=request.POST.get("serving_precision"),
                                         ip_address=client_ip(request))
    except Invalid as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Served in {model.serving_precision} from the next model load.")
    return redirect("registry:detail", project_id=project_id, model_id=model.pk)


@login_required
@require_POST
def precision_measurement(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    """Start a measurement, or (action=cancel, job=<id>) stop one of this model's."""
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    try:
        if request.POST.get("action") == "cancel":
            job_id = request.POST.get("job", "")
            job = model.precision_measurements.filter(pk=int(job_id)).first() if job_id.isdigit() else None
            if job is None:
                raise Invalid("No such measurement of this model.", field="job")
            precisions.precision_measurement_cancel(user=request.user, job=job, ip_address=client_ip(request))
            messages.success(request, "The measurement stops before its next precision.")
        else:
            precisions.precision_measurement_start(user=request.user, model=model, ip_address=client_ip(request))
            messages.success(request, "An inference worker measures the model in fp32, bf16 and int8.")
    except (Invalid, Conflict) as exc:
        messages.error(request, exc.message)
    return redirect("registry:detail", project_id=project_id, model_id=model.pk)


@login_required
@require_POST
def model_merge(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    adapter = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    try:
        merged = services.adapter_merge(user=request.user, adapter=adapter, name=request.POST.get("name", ""),
                                        ip_address=client_ip(request))
    except Invalid as exc:
        messages.error(request, exc.message)
        return redirect("registry:detail", project_id=project_id, model_id=adapter.pk)
    messages.success(request, f"Merging into “{merged.name}”: a worker writes the standalone model.")
    return redirect("registry:detail", project_id=project_id, model_id=merged.pk)


@login_required
@require_POST
def alias_move(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    """Point an alias of this model at a version: first a page that says what will change, then
    the move itself (one audited action) once confirmed."""
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    name = request.POST.get("alias", "").strip()
    protection = request.POST.get("protection", "")
    protected = {"protect": True, "unprotect": False}.get(protection)
    back_id = _int(request.POST.get("back")) or model.pk  # the version's page the promotion was asked from
    back = redirect("registry:detail", project_id=project_id, model_id=back_id)
    if request.POST.get("confirm") != "yes":
        version = services.alias_versions(model).filter(pk=_int(request.POST.get("version"))).first()
        if version is None:
            messages.error(request, "Choose a version of this model for the alias.")
            return back
        request.nav_section = "models"
        return render(request, "registry/alias_confirm.html", {
            "project": model.project, "model": model, "alias": name, "version": version, "protection": protection,
            "current": model.aliases.filter(name=name).select_related("version").first(), "tab": "models",
            "perms": policy.project_permissions(request.user, model.project), "back": back_id})
    try:
        alias = services.alias_set(user=request.user, model=model, name=name, version=request.POST.get("version"),
                                   protected=protected, ip_address=client_ip(request))
    except NotFound:
        raise
    except DomainError as exc:
        messages.error(request, exc.message)
        return back
    messages.success(request, f"{alias} now points at “{alias.version.name}”.")
    return back


@login_required
@require_POST
def alias_canary(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    """Start a canary on an alias (a share of callers, optional steps and thresholds), or roll it
    back by hand (the form asks first)."""
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    name = request.POST.get("alias", "").strip()
    back = redirect("registry:detail", project_id=project_id, model_id=model.pk)
    try:
        if request.POST.get("action") == "rollback":
            alias = services.alias_canary_stop(user=request.user, model=model, name=name, ip_address=client_ip(request))
            messages.success(request, f"{alias} serves “{alias.version.name}” to everyone again.")
            return back
        steps = [_int(step) if _int(step) is not None else step
                 for step in request.POST.get("steps", "").replace(",", " ").split()]
        alias = services.alias_canary_start(
            user=request.user, model=model, name=name, version=_int(request.POST.get("version")),
            weight=_int(request.POST.get("weight")), steps=steps, interval_s=_int(request.POST.get("interval_s") or 0),
            max_error_rate=_percent(request.POST.get("max_error_percent")),
            max_p99_latency_s=_float(request.POST.get("max_p99_latency_s")),
            min_requests=_int(request.POST.get("min_requests") or 20),
            quality_judge=request.POST.get("quality_judge") or None,
            max_quality_drop=_float(request.POST.get("max_quality_drop")), ip_address=client_ip(request))
    except NotFound:
        raise
    except DomainError as exc:
        messages.error(request, f"{exc.field}: {exc.message}" if exc.field else exc.message)
        return back
    messages.success(request, f"{alias} sends {alias.canary_weight}% of callers to “{alias.canary_version.name}”.")
    return back


def _float(value) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return value  # the service refuses it, naming the field


def _percent(value) -> float | None:
    number = _float(value)
    return number / 100 if isinstance(number, float) else number


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


@login_required
@require_POST
def catalogue_toggle(request: HttpRequest, project_id: int, entry_id: int) -> HttpResponse:
    """Enable a catalogue model in the project, or disable it."""
    project = policy.get_project(request.user, project_id)
    enable = request.POST.get("action") == "enable"
    try:
        if enable:
            model = services.catalogue_enable(user=request.user, project=project, entry_id=entry_id,
                                              ip_address=client_ip(request))
            messages.success(request, f"“{model.name}” is enabled in this project.")
        else:
            services.catalogue_disable(user=request.user, project=project, entry_id=entry_id,
                                       ip_address=client_ip(request))
            messages.success(request, "Disabled in this project.")
    except (Invalid, NotFound) as exc:
        messages.error(request, exc.message)
    return redirect("registry:list", project_id=project.pk)


@login_required
@require_POST
def adapter_share(request: HttpRequest, project_id: int, model_id: int) -> HttpResponse:
    adapter = policy.get_object(request.user, RegisteredModel, model_id, "model.view", project_id=project_id)
    try:
        if request.POST.get("action") == "unshare":
            services.adapter_unshare(user=request.user, adapter=adapter, project_id=request.POST.get("project"),
                                     ip_address=client_ip(request))
            messages.success(request, "No longer shared with that project.")
        else:
            shared = services.adapter_share(user=request.user, adapter=adapter, project_id=request.POST.get("project"),
                                            ip_address=client_ip(request))
            messages.success(request, f"Shared with {shared.project.name} as “{shared.name}”.")
    except DomainError as exc:
        messages.error(request, exc.message if not isinstance(exc, NotFound) else "No such project.")
    return redirect("registry:detail", project_id=project_id, model_id=adapter.pk)


def adapter_shares_for(user, model: RegisteredModel, perms) -> list:
    if "model.share" not in perms or model.kind != RegisteredModel.Kind.ADAPTER:
        return []
    return list(services.adapter_shares(user=user, adapter=model))


def share_targets(user, model: RegisteredModel, perms) -> list:
    """The other projects this person may add the adapter to (model.register there)."""
    if ("model.share" not in perms or model.kind != RegisteredModel.Kind.ADAPTER or model.shared_from_id
            or not (model.base_model and model.base_model.catalogue_id)):
        return []
    from apps.projects.models import Project

    ids = [pk for pk in policy.project_ids_with(user, "model.register") if pk != model.project_id]
    return list(Project.objects.filter(pk__in=ids).order_by("name"))
