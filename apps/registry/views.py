from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.core.errors import Invalid
from apps.core.http import client_ip
from apps.core.pages import run_service
from apps.projects import policy
from apps.registry import selectors, services
from apps.registry.models import RegisteredModel


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


@login_required
def all_models(request: HttpRequest) -> HttpResponse:
    """Models across my projects (through a role with model.view)."""
    request.nav_section = "models"
    project_ids = policy.project_ids_with(request.user, "model.view")
    return render(request, "registry/all.html", {"models": RegisteredModel.objects.filter(
        project_id__in=project_ids).select_related("project").order_by("project__name", "name")})


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
        "form": form, "root_entries": selectors.model_root_entries()}, status=400 if form.errors else 200)


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
    return render(request, "registry/detail.html", {
        "project": model.project, "model": model, "info": model.info, "form": form, "estimate": estimate,
        "perms": policy.project_permissions(request.user, model.project), "tab": "models",
        "can_download": model.kind == RegisteredModel.Kind.ADAPTER and policy.can(request.user, "model.download", model),
        "lineage": lineage, "adapter": adapter, "config": sorted(config.items()),
        "metrics": sorted((lineage.get("metrics") or {}).items())})


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
