from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from apps.core.errors import Invalid
from apps.core.http import client_ip
from apps.projects import policy, selectors, services
from apps.projects.forms import ProjectForm

PROJECTS_PER_PAGE = 50


@login_required
@require_http_methods(["GET", "POST"])
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = services.project_create(user=request.user, name=form.cleaned_data["name"],
                                              description=form.cleaned_data["description"],
                                              ip_address=client_ip(request))
        except Invalid as exc:
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, f"Project “{project.name}” created. You are its Owner.")
            return redirect("projects:dashboard", project_id=project.pk)
    show_archived = request.GET.get("archived") == "1"
    page = Paginator(selectors.project_list(user=request.user, include_archived=show_archived),
                     PROJECTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "projects/list.html", {"page": page, "form": form, "show_archived": show_archived},
                  status=400 if form.errors else 200)


@login_required
def project_dashboard(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    members = list(selectors.project_members(project=project))
    permissions = policy.project_permissions(request.user, project)
    return render(request, "projects/dashboard.html", {
        "project": project,
        "members": members,
        "counts": {"Members": len(members)},
        "activity": selectors.project_recent_activity(project=project),
        "perms": permissions,
    })
