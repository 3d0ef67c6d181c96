from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.comparison.models import Comparison
from apps.evaluation import selectors
from apps.projects import policy
from apps.providers import selectors as provider_selectors
from apps.registry.models import RegisteredModel
from workers.judging.rubric import KINDS, SCALES


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
