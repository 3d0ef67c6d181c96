"""Project pages: list, dashboard, settings, members, roles, object grants, audit log."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.services import project_invitation_create
from apps.core.errors import Conflict, Invalid, NotFound
from apps.core.http import client_ip
from apps.core.pages import run_service
from apps.datasets.models import Dataset
from apps.projects import policy, selectors, services
from apps.projects.api import audit_export_response
from apps.projects.forms import (
    AuditFilterForm,
    DeleteProjectForm,
    GrantForm,
    MemberAddForm,
    MemberInviteForm,
    ProjectForm,
    ProjectSettingsForm,
    RoleForm,
    role_choices,
)
from apps.projects.models import SERVING_LIMIT_FIELDS
from apps.projects.permissions import BUILTIN_ROLES, GRANTABLE, PERMISSIONS, grantable_model, permission_from_codename
from workers.ingest.export_formats import STREAM_FORMATS

PROJECTS_PER_PAGE = 50
AUDIT_PER_PAGE = 50


def _page(request: HttpRequest, template: str, project, context: dict, status: int = 200) -> HttpResponse:
    """Render a project page with what its tabs need to show or hide."""
    request.nav_section = context.pop("nav_section", "projects")
    context = {"project": project, "perms": policy.project_permissions(request.user, project), **context}
    return render(request, template, context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        project = run_service(form, lambda: services.project_create(
            user=request.user, name=form.cleaned_data["name"], description=form.cleaned_data["description"],
            ip_address=client_ip(request)))
        if project:
            messages.success(request, f"Project “{project.name}” created. You are its Owner.")
            return redirect("projects:dashboard", project_id=project.pk)
    show_archived = request.GET.get("archived") == "1"
    page = Paginator(selectors.project_list(user=request.user, include_archived=show_archived),
                     PROJECTS_PER_PAGE).get_page(request.GET.get("page"))
    shared = policy.shared_with(request.user, Dataset, "dataset.view")[:50]
    return render(request, "projects/list.html", {"page": page, "form": form, "show_archived": show_archived,
                                                  "shared": shared}, status=400 if form.errors else 200)


@login_required
def project_dashboard(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    members = list(selectors.project_members(project=project))
    return _page(request, "projects/dashboard.html", project, {
        "members": members,
        "counts": {"Members": len(members), "Datasets": project.datasets.count()},
        "activity": selectors.project_recent_activity(project=project),
        "tab": "overview",
    })


@login_required
@require_http_methods(["GET", "POST"])
def project_settings(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "project.edit")
    form = ProjectSettingsForm(request.POST if request.POST.get("form") == "edit" else None, instance=None,
                               initial={"name": project.name, "description": project.description,
                                        "gpu_hour_budget": project.gpu_hour_budget,
                                        **{name: getattr(project, name) for name in SERVING_LIMIT_FIELDS}})
    delete_form = DeleteProjectForm(request.POST if request.POST.get("form") == "delete" else None)
    ip = client_ip(request)
    if request.method == "POST":
        action = request.POST.get("form")
        if action == "edit" and form.is_valid():
            if run_service(form, lambda: services.project_update(
                    user=request.user, project=project, name=form.cleaned_data["name"],
                    description=form.cleaned_data["description"],
                    gpu_hour_budget=form.cleaned_data["gpu_hour_budget"], ip_address=ip,
                    **{name: form.cleaned_data[name] for name in SERVING_LIMIT_FIELDS})):
                messages.success(request, "Project saved.")
                return redirect("projects:settings", project_id=project.pk)
        elif action in ("archive", "restore"):
            services.project_set_archived(user=request.user, project=project, archived=action == "archive",
                                          ip_address=ip)
            messages.success(request, f"Project {'archived' if action == 'archive' else 'restored'}.")
            return redirect("projects:settings", project_id=project.pk)
        elif action == "delete" and delete_form.is_valid():
            name = project.name
            try:
                services.project_delete(user=request.user, project=project,
                                        confirm_name=delete_form.cleaned_data["confirm_name"], ip_address=ip)
            except Invalid as exc:
                delete_form.add_error("confirm_name", exc.message)
            else:
                messages.success(request, f"Project “{name}” deleted.")
                return redirect("projects:list")
    errors = form.errors or delete_form.errors
    return _page(request, "projects/settings.html", project, {"form": form, "delete_form": delete_form,
                                                               "tab": "settings"}, status=400 if errors else 200)


def _members_page(request: HttpRequest, project, *, add_form=None, invite_form=None, new_link: str | None = None,
                  status: int = 200) -> HttpResponse:
    return _page(request, "projects/members.html", project, {
        "members": selectors.project_members(project=project),
        "add_form": add_form or MemberAddForm(project=project, prefix="add"),
        "invite_form": invite_form or MemberInviteForm(project=project, prefix="invite"),
        "role_choices": role_choices(project), "new_link": new_link, "tab": "members"}, status=status)


@login_required
def members(request: HttpRequest, project_id: int) -> HttpResponse:
    return _members_page(request, policy.get_project(request.user, project_id))


@login_required
@require_POST
def member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    form = MemberAddForm(request.POST, project=project, prefix="add")
    membership = form.is_valid() and run_service(form, lambda: services.member_add(
        actor=request.user, project=project, ip_address=client_ip(request), **form.cleaned_data))
    if not membership:
        return _members_page(request, project, add_form=form, status=400)
    messages.success(request, f"{membership.user.username} joined as {membership.role_name}.")
    return redirect("projects:members", project_id=project.pk)


@login_required
@require_POST
def member_invite(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    form = MemberInviteForm(request.POST, project=project, prefix="invite")
    created = form.is_valid() and run_service(form, lambda: project_invitation_create(
        by=request.user, project=project, ip_address=client_ip(request), **form.cleaned_data))
    if not created:
        return _members_page(request, project, invite_form=form, status=400)
    invitation, raw = created
    messages.success(request, f"Invitation for {invitation.username} created. Copy the link now: it is shown only once.")
    # Rendered, not redirected: the link exists only in this response.
    return _members_page(request, project,
                         new_link=request.build_absolute_uri(reverse("accounts:accept_invitation", args=[raw])))


def _membership(request: HttpRequest, project_id: int, membership_id: int):
    project = policy.get_project(request.user, project_id)
    membership = selectors.project_members(project=project).filter(pk=membership_id).first()
    if membership is None:
        raise NotFound()
    return project, membership


@login_required
@require_POST
def member_role(request: HttpRequest, project_id: int, membership_id: int) -> HttpResponse:
    _, membership = _membership(request, project_id, membership_id)
    try:
        services.member_change_role(actor=request.user, membership=membership, role=request.POST.get("role", ""),
                                    ip_address=client_ip(request))
        messages.success(request, f"{membership.user.username} is now {membership.role_name}.")
    except (Invalid, Conflict) as exc:
        messages.error(request, exc.message)
    return redirect("projects:members", project_id=project_id)


@login_required
@require_POST
def member_remove(request: HttpRequest, project_id: int, membership_id: int) -> HttpResponse:
    project, membership = _membership(request, project_id, membership_id)
    try:
        services.member_remove(actor=request.user, membership=membership, ip_address=client_ip(request))
    except (Invalid, Conflict) as exc:
        messages.error(request, exc.message)
        return redirect("projects:members", project_id=project_id)
    if membership.user_id == request.user.pk:
        messages.success(request, f"You left “{project.name}”.")
        return redirect("projects:list")
    messages.success(request, f"{membership.user.username} was removed.")
    return redirect("projects:members", project_id=project_id)


@login_required
@require_http_methods(["GET", "POST"])
def roles(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    form = RoleForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        role = run_service(form, lambda: services.role_create(actor=request.user, project=project,
                                                              ip_address=client_ip(request), **form.cleaned_data))
        if role:
            messages.success(request, f"Role “{role.name}” created.")
            return redirect("projects:roles", project_id=project.pk)
    return _page(request, "projects/roles.html", project, {
        "builtin_roles": [(role, sorted(role.permissions)) for role in BUILTIN_ROLES.values()],
        "custom_roles": selectors.project_roles(project=project), "form": form, "tab": "roles",
        "permission_count": len(PERMISSIONS),
    }, status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def role_edit(request: HttpRequest, project_id: int, role_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "role.manage")
    role = project.roles.filter(pk=role_id).first()
    if role is None:
        raise NotFound()
    form = RoleForm(request.POST if request.POST.get("form") == "edit" else None,
                    initial={"name": role.name, "description": role.description, "permissions": role.permissions})
    if request.method == "POST":
        if request.POST.get("form") == "delete":
            try:
                services.role_delete(actor=request.user, role=role, ip_address=client_ip(request))
            except Conflict as exc:
                messages.error(request, exc.message)
                return redirect("projects:role_edit", project_id=project.pk, role_id=role.pk)
            messages.success(request, f"Role “{role.name}” deleted.")
            return redirect("projects:roles", project_id=project.pk)
        if form.is_valid() and run_service(form, lambda: services.role_update(
                actor=request.user, role=role, ip_address=client_ip(request), **form.cleaned_data)):
            messages.success(request, f"Role “{role.name}” saved. Its members' access changed at once.")
            return redirect("projects:roles", project_id=project.pk)
    return _page(request, "projects/role_edit.html", project, {"role": role, "form": form, "tab": "roles"},
                 status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def access(request: HttpRequest, project_id: int) -> HttpResponse:
    """Object grants: one permission on one dataset for one person, without a project role."""
    project = policy.get_project(request.user, project_id, "member.manage")
    form = GrantForm(request.POST if request.POST.get("form") == "grant" else None, project=project)
    ip = client_ip(request)
    if request.method == "POST":
        if request.POST.get("form") == "revoke":
            try:
                grant_id = int(request.POST.get("grant", ""))
            except ValueError:
                raise NotFound() from None
            services.grant_revoke(actor=request.user, grant_id=grant_id, project=project, ip_address=ip)
            messages.success(request, "Access revoked.")
            return redirect("projects:access", project_id=project.pk)
        if form.is_valid():
            kind, _, object_id = form.cleaned_data["target"].partition(":")
            target = grantable_model(kind).objects.filter(project=project, pk=object_id).first()
            if target is None:
                raise NotFound()
            if run_service(form, lambda: services.grant_create(
                    actor=request.user, obj=target, username=form.cleaned_data["username"],
                    permission=form.cleaned_data["permission"], ip_address=ip)):
                messages.success(request, f"{form.cleaned_data['username']} may now "
                                          f"{form.cleaned_data['permission']} on “{target.name}”.")
                return redirect("projects:access", project_id=project.pk)
    names = {kind: dict(grantable_model(kind).objects.filter(project=project).values_list("pk", "name"))
             for kind in GRANTABLE}
    rows = []
    for grant in selectors.project_grants(project=project):
        permission = permission_from_codename(grant.permission.codename)
        kind = permission.split(".")[0]
        rows.append({"id": grant.pk, "user": grant.user.username, "permission": permission,
                     "object": f"{names[kind].get(int(grant.object_pk), '?')} ({kind})"})
    return _page(request, "projects/access.html", project, {"grants": rows, "form": form, "tab": "access"},
                 status=400 if form.errors else 200)


@login_required
def audit(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "audit.view")
    form = AuditFilterForm(request.GET or None)
    filters = {}
    if form.is_valid():
        data = form.cleaned_data
        filters = {"action": data["action"], "actor": data["actor"]}
        from datetime import datetime, time, timedelta

        from django.utils import timezone

        if data["since"]:
            filters["since"] = timezone.make_aware(datetime.combine(data["since"], time.min))
        if data["until"]:
            filters["until"] = timezone.make_aware(datetime.combine(data["until"] + timedelta(days=1), time.min))
    events = selectors.audit_events(project=project, **filters)
    export = request.GET.get("export")
    if export in STREAM_FORMATS:
        return audit_export_response(events, export, f"audit-project-{project.pk}")
    page = Paginator(events, AUDIT_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("export", None)
    return _page(request, "projects/audit.html", project, {"page": page, "form": form, "tab": "audit",
                                                            "query": query.urlencode()},
                 status=400 if form.errors else 200)


@login_required
@require_POST
def leave(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    membership = project.memberships.get(user=request.user)
    try:
        services.member_remove(actor=request.user, membership=membership, ip_address=client_ip(request))
    except Conflict as exc:
        messages.error(request, exc.message)
        return redirect("projects:members", project_id=project.pk)
    messages.success(request, f"You left “{project.name}”.")
    return redirect("projects:list")
