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
