from django import forms
from django.contrib.auth import authenticate, password_validation
from django.contrib.auth import forms as auth_forms

from apps.projects.permissions import PERMISSIONS


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """The old password is checked as a login is (authenticate, through django-axes): wrong old
    passwords count towards the same lockout, and a locked-out account cannot change its password
    by guessing either."""

    def __init__(self, user, *args, request=None, **kwargs):
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self):
        old_password = self.cleaned_data["old_password"]
        if authenticate(self.request, username=self.user.get_username(), password=old_password) is None:
            raise forms.ValidationError(self.error_messages["password_incorrect"], code="password_incorrect")
        return old_password


class InvitationForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False)


class UserCreateForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False)
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
                               help_text=password_validation.password_validators_help_text_html())
    is_staff = forms.BooleanField(required=False, label="Site admin")


class SetPasswordForm(forms.Form):
    password = forms.CharField(label="Password", widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
                               help_text=password_validation.password_validators_help_text_html())
    password_again = forms.CharField(label="Password (again)",
                                     widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))

    def clean(self):
        data = super().clean()
        if data.get("password") and data.get("password") != data.get("password_again"):
            self.add_error("password_again", "The two passwords differ.")
        return data


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. “nightly export job”.")
    permissions = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    expires_in_days = forms.IntegerField(min_value=1, max_value=366, required=False, label="Expires in (days)",
                                         help_text="Leave empty for no expiry.")

    def __init__(self, *args, allowed: frozenset[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        names = [name for name in PERMISSIONS if allowed is None or name in allowed]
        self.fields["permissions"].choices = [(name, name) for name in names]


class SsoMappingForm(forms.Form):
    provider_id = forms.ChoiceField(label="Identity provider")
    group = forms.CharField(max_length=256, help_text="The group's name exactly as the provider sends it.")
    site_admin = forms.BooleanField(required=False, label="Site admin (instead of a project role)")
    project = forms.ModelChoiceField(queryset=None, required=False)
    role = forms.CharField(max_length=60, required=False,
                           help_text="A built-in role (owner, admin, scientist, annotator, viewer) or a custom role's name.")

    def __init__(self, *args, providers=(), **kwargs):
        from apps.projects.models import Project

        super().__init__(*args, **kwargs)
        self.fields["provider_id"].choices = [(p["id"], p["name"]) for p in providers]
        self.fields["project"].queryset = Project.objects.filter(archived_at__isnull=True)


class SsoLinkForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="The existing local account.")
    provider_id = forms.ChoiceField(label="Identity provider")
    email = forms.EmailField(help_text="The account's email, which the provider will send.")

    def __init__(self, *args, providers=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["provider_id"].choices = [(p["id"], p["name"]) for p in providers]
