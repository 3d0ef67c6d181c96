from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from apps.core.errors import PermissionDenied
from apps.core.http import client_ip
from apps.core.pages import run_service
from apps.datasets import services
from apps.datasets.forms import DatasetForm
from apps.datasets.models import Dataset
from apps.projects import policy
from apps.projects.models import Membership


@login_required
def all_datasets(request: HttpRequest) -> HttpResponse:
    """Datasets across my projects (through a role with dataset.view) and those shared with me."""
    memberships = Membership.objects.filter(user=request.user).select_related("custom_role")
    project_ids = [m.project_id for m in memberships if "dataset.view" in m.permission_set]
    datasets = Dataset.objects.filter(project_id__in=project_ids).select_related("project").order_by(
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
    request.nav_section = "datasets"
    return render(request, "datasets/detail.html", {
        "dataset": dataset, "project": dataset.project, "tab": "datasets",
        "perms": sorted(policy.permissions_on(request.user, dataset)),
        "is_member": policy.can(request.user, "project.view", dataset.project),
    })
