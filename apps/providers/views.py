"""Site staff pages: providers, their models and projects, and the address allowlist; and a
project's page of what its provider calls cost."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.core.errors import DomainError, Invalid, NotFound
from apps.core.http import client_ip
from apps.projects import policy
from apps.providers import selectors, services
from apps.providers.access import require_site_staff
from apps.providers.forms import AllowedNetworkForm, EnableForm, ProviderForm
from apps.providers.models import AllowedNetwork, ProviderEnablement

FORM_FIELDS = set(ProviderForm.base_fields)


def _form_error(form, exc: DomainError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


@login_required
@require_http_methods(["GET", "POST"])
def provider_list(request: HttpRequest) -> HttpResponse:
    require_site_staff(request.user)
    form = ProviderForm(prefix="provider")
    network_form = AllowedNetworkForm(prefix="network")
    status = 200
    if request.method == "POST":
        if "network" in request.POST:
            network_form = AllowedNetworkForm(request.POST, prefix="network")
            if network_form.is_valid():
                try:
                    services.allowlist_add(user=request.user, ip_address=client_ip(request), **network_form.cleaned_data)
                except Invalid as exc:
                    _form_error(network_form, exc)
                else:
                    messages.success(request, f"{network_form.cleaned_data['network']} allowlisted.")
                    return redirect("providers:list")
        else:
            form = ProviderForm(request.POST, prefix="provider")
            if form.is_valid():
                try:
                    provider = services.provider_create(user=request.user, ip_address=client_ip(request),
                                                        **form.service_values())
                except Invalid as exc:
                    _form_error(form, exc)
                else:
                    messages.success(request, f"Provider {provider.name} saved. Its API key will not be shown again.")
                    return redirect("providers:detail", provider.pk)
        status = 400
    request.nav_section = "providers"
    return render(request, "providers/list.html", {
        "providers": selectors.providers(), "allowlist": selectors.allowlist(), "form": form,
        "network_form": network_form}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def provider_detail(request: HttpRequest, provider_id: int) -> HttpResponse:
    provider = services.get_provider(request.user, provider_id)
    status = 200
    if request.method == "POST":
        form = ProviderForm(request.POST, prefix="provider")
        if form.is_valid():
            try:
                services.provider_update(user=request.user, provider=provider, ip_address=client_ip(request),
                                         **form.service_values())
            except Invalid as exc:
                _form_error(form, exc)
                provider.refresh_from_db()
            else:
                messages.success(request, f"Provider {provider.name} saved.")
                return redirect("providers:detail", provider.pk)
        status = 400
    else:
        form = ProviderForm(prefix="provider", initial={
            "name": provider.name, "base_url": provider.base_url, "enabled": provider.enabled,
            "models": "\n".join(provider.models.values_list("name", flat=True)),
            "daily_token_budget": provider.daily_token_budget, "daily_request_budget": provider.daily_request_budget,
            "requests_per_minute": provider.requests_per_minute, "timeout_s": provider.timeout_s,
            "max_retries": provider.max_retries})
    request.nav_section = "providers"
    return render(request, "providers/detail.html", {
        "provider": provider, "form": form, "enable_form": EnableForm(prefix="enable"),
        "enablements": selectors.enablements(provider),
        "usage": provider.usage.select_related("project")[:60]}, status=status)


@login_required
@require_POST
def provider_action(request: HttpRequest, provider_id: int) -> HttpResponse:
    """Fetch models, enable for a project, disable for one, or delete the provider."""
    provider = services.get_provider(request.user, provider_id)
    action = request.POST.get("action")
    ip = client_ip(request)
    try:
        if action == "fetch-models":
            names = services.provider_models_fetch(user=request.user, provider=provider, ip_address=ip)
            messages.success(request, f"The provider lists {len(names)} model(s).")
        elif action == "enable":
            form = EnableForm(request.POST, prefix="enable")
            if not form.is_valid():
                raise Invalid("Choose a project.", field="project")
            services.provider_enable(user=request.user, provider=provider, project_id=form.cleaned_data["project"].pk,
                                     ip_address=ip)
            messages.success(request, f"{provider.name} enabled for {form.cleaned_data['project'].name}.")
        elif action == "disable-project":
            enablement = ProviderEnablement.objects.filter(provider=provider,
                                                           pk=request.POST.get("enablement", "")[:19] or 0).first()
            if enablement is None:
                raise NotFound()
            services.provider_disable_for_project(user=request.user, enablement=enablement, ip_address=ip)
            messages.success(request, f"{provider.name} disabled for {enablement.project.name}.")
        elif action == "delete":
            services.provider_delete(user=request.user, provider=provider, ip_address=ip)
            messages.success(request, f"Provider {provider.name} deleted.")
            return redirect("providers:list")
        else:
            raise Invalid("Unknown action.", field="action")
    except (Invalid, services.ProviderError) as exc:
        messages.error(request, exc.message)
    return redirect("providers:detail", provider.pk)


@login_required
@require_POST
def network_remove(request: HttpRequest, network_id: int) -> HttpResponse:
    require_site_staff(request.user)
    entry = AllowedNetwork.objects.filter(pk=network_id).first()
    if entry is None:
        raise NotFound()
    services.allowlist_remove(user=request.user, entry=entry, ip_address=client_ip(request))
    messages.success(request, f"{entry.network} removed from the allowlist.")
    return redirect("providers:list")


@login_required
def project_costs(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's provider calls: tokens and cost in all and per model, and the latest calls."""
    project = policy.get_project(request.user, project_id, "model.view")
    return render(request, "providers/costs.html", {
        "project": project, "perms": policy.project_permissions(request.user, project), "tab": "costs",
        "costs": selectors.project_costs(request.user, project), "calls": selectors.recent_calls(project)})
