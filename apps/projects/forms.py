from django import forms

from apps.projects.models import SERVING_LIMIT_FIELDS, Project
from apps.projects.permissions import BUILTIN_ROLES, GRANTABLE, PERMISSIONS, grantable_model

PERMISSION_CHOICES = [(name, f"{name} — {text}") for name, text in PERMISSIONS.items()]


def role_choices(project) -> list[tuple[str, str]]:
    return ([(key, role.name) for key, role in BUILTIN_ROLES.items()]
            + [(role.name, f"{role.name} (custom)") for role in project.roles.all()])


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}


class ProjectSettingsForm(ProjectForm):
    class Meta(ProjectForm.Meta):
        fields = ["name", "description", "gpu_hour_budget", *SERVING_LIMIT_FIELDS]
        labels = {"gpu_hour_budget": "GPU-hour budget",
                  "serving_max_concurrent_per_token": "Generations at once per API token",
                  "serving_max_concurrent_per_project": "Generations at once for the project",
                  "serving_tokens_per_minute_per_token": "Tokens a minute per API token",
                  "serving_tokens_per_minute_per_project": "Tokens a minute for the project"}
        help_texts = {"gpu_hour_budget": "Worker hours the project's fine-tunes may use in all (empty: no limit); "
                                          "launching stops once it is used.",
                      **{name: "Serving through /v1 (empty: the site's default); over it a request gets 429."
                         for name in SERVING_LIMIT_FIELDS}}


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField()

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = role_choices(project)
        self.fields["role"].initial = "viewer"  # the least privileged role unless the admin picks another


class MemberInviteForm(MemberAddForm):
    username = forms.CharField(max_length=150, help_text="The username the new person will log in with.")


class RoleForm(forms.Form):
    name = forms.CharField(max_length=60)
    description = forms.CharField(max_length=300, required=False)
    permissions = forms.MultipleChoiceField(choices=PERMISSION_CHOICES, widget=forms.CheckboxSelectMultiple)


class GrantForm(forms.Form):
    """One person, one object (a dataset or a model), one of that object's permissions."""

    username = forms.CharField(max_length=150)
    target = forms.ChoiceField(label="Dataset or model")
    permission = forms.ChoiceField(choices=[(n, n) for n in PERMISSIONS if n.split(".")[0] in GRANTABLE])

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = [
            (f"{kind}:{obj.pk}", f"{obj.name} ({kind})")
            for kind in GRANTABLE for obj in grantable_model(kind).objects.filter(project=project).order_by("name")]


class AuditFilterForm(forms.Form):
    action = forms.CharField(max_length=64, required=False, help_text="prefix, e.g. member.")
    actor = forms.CharField(max_length=150, required=False)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))


class DeleteProjectForm(forms.Form):
    confirm_name = forms.CharField(max_length=120, label="Type the project's name to confirm")
