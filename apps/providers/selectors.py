"""Reading providers: what a project may use, and what it used."""

from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from apps.core.errors import NotFound
from apps.projects import policy
from apps.projects.models import Project
from apps.providers.models import AllowedNetwork, Provider, ProviderEnablement, ProviderModel, ProviderUsage


def usable_models(project: Project) -> QuerySet[ProviderModel]:
    """Models of enabled providers that site staff enabled for this project."""
    return (ProviderModel.objects.filter(enabled=True, provider__enabled=True,
                                         provider__enablements__project=project)
            .select_related("provider").order_by("provider__name", "name"))


def visible_models(user, project: Project, token=None) -> QuerySet[ProviderModel]:
    """The project's usable provider models, for a principal who may see its models."""
    policy.require(user, "model.view", project, token)
    return usable_models(project)


def usable_model(project: Project, ref) -> ProviderModel:
    """A usable model of the project by id, or as "provider/model"; NotFound otherwise (another
    project's provider, a disabled one or an unknown one look alike)."""
    models = usable_models(project)
    found = None
    if isinstance(ref, ProviderModel):
        found = models.filter(pk=ref.pk).first()
    elif isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit() and len(ref) < 19):
        found = models.filter(pk=int(ref)).first()
    elif isinstance(ref, str) and "/" in ref:
        provider_name, _, model_name = ref.partition("/")
        found = models.filter(provider__name=provider_name, name=model_name).first()
    if found is None:
        raise NotFound(f"No provider model {str(ref)[:120]!r} is enabled for this project.")
    return found


def project_usage(user, project: Project, *, days: int = 30, token=None) -> QuerySet[ProviderUsage]:
    policy.require(user, "model.view", project, token)
    since = timezone.now().date() - timedelta(days=days)
    return ProviderUsage.objects.filter(project=project, day__gte=since).select_related("provider")


def providers() -> QuerySet[Provider]:
    return Provider.objects.prefetch_related("models", "enablements__project")


def allowlist() -> QuerySet[AllowedNetwork]:
    return AllowedNetwork.objects.all()


def enablements(provider: Provider) -> QuerySet[ProviderEnablement]:
    return provider.enablements.select_related("project").order_by("project__name")
