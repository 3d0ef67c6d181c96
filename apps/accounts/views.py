from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_http_methods

from apps.accounts import services
from apps.accounts.forms import InvitationForm, PasswordChangeForm, SetPasswordForm, UserCreateForm
from apps.accounts.models import Invitation
from apps.core.errors import Gone, Invalid, NotFound, PermissionDenied
from apps.core.http import client_ip


class LogoutView(auth_views.LogoutView):
    """Ends the local session; for a session opened by single sign-on, then sends the browser on to
    the provider to end its session as well (it comes back to the login page)."""

    def post(self, request, *args, **kwargs):
        from apps.accounts import oidc, sso

        state = request.session.get(sso.SESSION_KEY) or {}
        response = super().post(request, *args, **kwargs)
        if state:
            after_logout = request.build_absolute_uri(reverse("accounts:login"))
            if url := oidc.end_session_url(state, after_logout=after_logout):
                return redirect(url)
        return response


class LoginView(auth_views.LoginView):
    """Passwords, and a button per identity provider. With LOCAL_PASSWORD_LOGIN off the password form
    shows only at ?local=1, for the break-glass accounts (the backend refuses everyone else)."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def get_initial(self):
        return {"username": self.request.GET.get("username", "")[:150]}

    def get_context_data(self, **kwargs):
        from django.conf import settings

        from apps.accounts.oidc import providers

        show_passwords = settings.LOCAL_PASSWORD_LOGIN or bool(self.request.GET.get("local")) \
            or self.request.method == "POST"
        return {**super().get_context_data(**kwargs), "sso_providers": providers(),
                "show_passwords": show_passwords, "break_glass_only": not settings.LOCAL_PASSWORD_LOGIN}

    def render_to_response(self, context, **kwargs):
        from apps.accounts.oidc import authorization_origins
        from apps.core.middleware import CONTENT_SECURITY_POLICY

        response = super().render_to_response(context, **kwargs)
        origins = authorization_origins()
        if origins:
            response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY.replace(
                "form-action 'self'", "form-action 'self' " + " ".join(origins))
        return response


class PasswordChangeView(auth_views.PasswordChangeView):
    """Changing the password ends every other session (Django's session hash) and closes
    the person's open websockets, which re-check their session."""

    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("accounts:password_change_done")
    form_class = PasswordChangeForm

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    def form_valid(self, form):
        from apps.projects.audit import audit_record
        from apps.projects.events import access_revoked

        response = super().form_valid(form)
        audit_record(actor=self.request.user, action="user.password_change", target=self.request.user,
                     ip_address=client_ip(self.request))
        access_revoked(user_id=self.request.user.pk, project_id=None)
        return response


class PasswordChangeDoneView(auth_views.PasswordChangeDoneView):
    template_name = "accounts/password_change_done.html"


class PasswordResetView(auth_views.PasswordResetConfirmView):
    """The one-time link a site admin hands out: the person sets a new password (Django's view
    and token; a used or expired link says so)."""

    template_name = "accounts/password_reset.html"
    success_url = reverse_lazy("accounts:password_reset_done")


class PasswordResetDoneView(auth_views.PasswordResetCompleteView):
    template_name = "accounts/password_reset_done.html"


@login_required
@require_http_methods(["POST"])
def user_action(request: HttpRequest, user_id: int) -> HttpResponse:
    """Site admins: deactivate, reactivate, or make a password reset link for an account."""
    if not request.user.is_staff:
        raise PermissionDenied("site.admin", "Only site admins can manage user accounts.")
    target = get_user_model().objects.filter(pk=user_id).first()
    if target is None:
        raise NotFound()
    action = request.POST.get("action")
    try:
        if action in ("deactivate", "activate"):
            services.user_set_active(by=request.user, user=target, active=action == "activate",
                                     ip_address=client_ip(request))
            messages.success(request, f"{target.username} {'reactivated' if action == 'activate' else 'deactivated'}.")
        elif action == "reset":
            link = request.build_absolute_uri(services.user_reset_link(by=request.user, user=target,
                                                                       ip_address=client_ip(request)))
            request.session["reset_link"] = {"username": target.username, "link": link}
        else:
            raise Invalid("action is activate, deactivate or reset.", field="action")
    except Invalid as exc:
        messages.error(request, exc.message)
    return redirect("accounts:users")


@login_required
@require_http_methods(["GET", "POST"])
def users(request: HttpRequest) -> HttpResponse:
    """Site admins create accounts directly or hand out one-time invitation links."""
    if not request.user.is_staff:
        raise PermissionDenied("site.admin", "Only site admins can manage user accounts.")
    invite_form = InvitationForm(prefix="invite")
    user_form = UserCreateForm(prefix="user")
    new_link = None
    status = 200
    if request.method == "POST":
        if "invite" in request.POST:
            invite_form = InvitationForm(request.POST, prefix="invite")
            if invite_form.is_valid():
                try:
                    invitation, raw = services.invitation_create(by=request.user, ip_address=client_ip(request),
                                                                 **invite_form.cleaned_data)
                except Invalid as exc:
                    invite_form.add_error(exc.field, exc.message)
                else:
                    new_link = request.build_absolute_uri(reverse("accounts:accept_invitation", args=[raw]))
                    messages.success(request, f"Invitation for {invitation.username} created. "
                                              "Copy the link now: it is shown only once.")
        else:
            user_form = UserCreateForm(request.POST, prefix="user")
            if user_form.is_valid():
                try:
                    user = services.user_create(by=request.user, ip_address=client_ip(request),
                                                **user_form.cleaned_data)
                except Invalid as exc:
                    user_form.add_error(exc.field, exc.message)
                else:
                    messages.success(request, f"Account {user.username} created.")
                    return redirect("accounts:users")
        if invite_form.errors or user_form.errors:
            status = 400
    reset_link = request.session.pop("reset_link", None)  # shown once, on the page after making it
    response = render(request, "accounts/users.html", {
        "reset_link": reset_link,
        "users": get_user_model().objects.order_by("username"),
        "invitations": Invitation.objects.select_related("created_by")[:50],
        "invite_form": invite_form,
        "user_form": user_form,
        "new_link": new_link,
    }, status=status)
    if new_link or reset_link:
        response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
def accept_invitation(request: HttpRequest, token: str) -> HttpResponse:
    try:
        invitation = services.invitation_for_token(token)
    except (NotFound, Gone) as exc:
        return render(request, "accounts/invitation_invalid.html", {"message": exc.message}, status=exc.status)
    form = SetPasswordForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.invitation_accept(raw=token, password=form.cleaned_data["password"], request=request)
        except Invalid as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        except Gone as exc:
            return render(request, "accounts/invitation_invalid.html", {"message": exc.message}, status=410)
        else:
            messages.success(request, "Your password is set. Log in to start.")
            return redirect(f"{reverse('accounts:login')}?username={invitation.username}")
    return render(request, "accounts/accept_invitation.html", {"invitation": invitation, "form": form},
                  status=400 if form.errors else 200)


def _tokens_page(request: HttpRequest, *, project=None) -> HttpResponse:
    from datetime import timedelta

    from django.utils import timezone

    from apps.accounts.forms import TokenForm
    from apps.accounts.models import ApiToken
    from apps.core.pages import run_service
    from apps.projects import policy

    allowed = policy.project_permissions(request.user, project) if project else None
    form = TokenForm(request.POST if request.POST.get("form") == "create" else None, allowed=allowed)
    new_token = None
    ip = client_ip(request)
    if request.method == "POST":
        if request.POST.get("form") == "revoke":
            tokens = ApiToken.objects.filter(project=project) if project else ApiToken.objects.filter(
                user=request.user, project__isnull=True)
            api_token = tokens.filter(pk=request.POST.get("token") or 0).first()
            if api_token is None:
                raise NotFound()
            services.token_revoke(user=request.user, api_token=api_token, ip_address=ip)
            messages.success(request, f"Token “{api_token.name}” revoked.")
            return redirect(request.path)
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            created = run_service(form, lambda: services.token_create(
                user=request.user, name=form.cleaned_data["name"], permissions=form.cleaned_data["permissions"],
                project=project, expires_at=timezone.now() + timedelta(days=days) if days else None, ip_address=ip))
            if created:
                new_token = created[1]
                form = TokenForm(allowed=allowed)
    tokens = (ApiToken.objects.filter(project=project) if project
              else ApiToken.objects.filter(user=request.user, project__isnull=True)).select_related("user")
    context = {"form": form, "tokens": tokens, "new_token": new_token, "project": project, "tab": "tokens"}
    if project:
        context["perms"] = policy.project_permissions(request.user, project)
    response = render(request, "accounts/tokens.html", context, status=400 if form.errors else 200)
    if new_token:  # shown once: no cache (browser, proxy) may keep the page that reveals it
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_http_methods(["GET", "POST"])
def personal_tokens(request: HttpRequest) -> HttpResponse:
    return _tokens_page(request)


@login_required
@require_http_methods(["GET", "POST"])
def project_tokens(request: HttpRequest, project_id: int) -> HttpResponse:
    from apps.projects import policy

    return _tokens_page(request, project=policy.get_project(request.user, project_id, "token.manage"))


@login_required
@require_http_methods(["GET", "POST"])
def sso_admin(request: HttpRequest) -> HttpResponse:
    """Site admins: map provider groups to project roles or site admin; approve linking an existing
    local account to a provider identity."""
    from django.conf import settings

    from apps.accounts.forms import SsoLinkForm, SsoMappingForm
    from apps.accounts.models import SsoGroupMapping, SsoLinkApproval
    from apps.core.pages import run_service

    if not request.user.is_staff:
        raise PermissionDenied("site.admin", "Only site admins can manage single sign-on.")
    providers = settings.SSO_PROVIDERS
    ip = client_ip(request)
    form_name = request.POST.get("form") if request.method == "POST" else None
    mapping_form = SsoMappingForm(request.POST if form_name == "mapping" else None, providers=providers,
                                  prefix="mapping")
    link_form = SsoLinkForm(request.POST if form_name == "link" else None, providers=providers, prefix="link")
    if form_name == "delete":
        mapping = SsoGroupMapping.objects.filter(pk=request.POST.get("mapping") or 0).first()
        if mapping is None:
            raise NotFound()
        services.sso_mapping_delete(by=request.user, mapping=mapping, ip_address=ip)
        messages.success(request, "Mapping deleted.")
        return redirect("accounts:sso_admin")
    if form_name == "mapping" and mapping_form.is_valid():
        data = mapping_form.cleaned_data
        if run_service(mapping_form, lambda: services.sso_mapping_create(
                by=request.user, provider_id=data["provider_id"], group=data["group"], site_admin=data["site_admin"],
                project=None if data["site_admin"] else data["project"], role=data["role"], ip_address=ip)):
            messages.success(request, "Mapping added: it applies at each member's next sign-in.")
            return redirect("accounts:sso_admin")
    if form_name == "link" and link_form.is_valid():
        data = link_form.cleaned_data
        if run_service(link_form, lambda: services.sso_link_approve(
                by=request.user, username=data["username"], provider_id=data["provider_id"], email=data["email"],
                ip_address=ip)):
            messages.success(request, f"{data['username']} may now sign in with the provider once to link the accounts.")
            return redirect("accounts:sso_admin")
    return render(request, "accounts/sso.html", {
        "providers": providers,
        "mappings": SsoGroupMapping.objects.select_related("project", "custom_role"),
        "approvals": SsoLinkApproval.objects.select_related("user", "created_by")[:50],
        "mapping_form": mapping_form,
        "link_form": link_form,
        "local_passwords": settings.LOCAL_PASSWORD_LOGIN,
        "break_glass": settings.BREAK_GLASS_USERS,
    }, status=400 if mapping_form.errors or link_form.errors else 200)
