from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.projects import policy
from apps.providers import selectors as provider_selectors
from apps.registry.models import RegisteredModel


@login_required
def playground(request: HttpRequest, project_id: int) -> HttpResponse:
    """Chat with a model or adapter of the project; tokens stream over the websocket."""
    project = policy.get_project(request.user, project_id, "model.generate")
    models = (policy.visible_in_project(request.user, RegisteredModel, project, "model.view")
              .filter(status=RegisteredModel.Status.READY).order_by("kind", "name"))
    perms = policy.project_permissions(request.user, project)
    # Outside models too, for those who may send the project's prompts out (provider.use).
    provider_models = provider_selectors.usable_models(project) if "provider.use" in perms else []
    request.nav_section = "models"
    return render(request, "serving/playground.html", {
        "project": project, "perms": perms, "tab": "playground",
        "models": models, "provider_models": provider_models, "selected": request.GET.get("model", "")})
