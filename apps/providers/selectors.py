"""Reading providers: what a project may use, and what it used."""

from datetime import timedelta
from decimal import Decimal

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from apps.core.errors import NotFound
from apps.projects import policy
from apps.projects.models import Project
from apps.providers.models import (
    AllowedNetwork,
    Provider,
    ProviderCall,
    ProviderEnablement,
    ProviderModel,
    ProviderUsage,
)

MICRO = Decimal("0.000001")


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


def project_costs(user, project: Project, *, token=None) -> dict:
    """Every provider call of the project: calls, tokens and cost, in all and per provider model
    (cost: decimal text to six decimals; calls made while their model had no price add none)."""
    policy.require(user, "model.view", project, token)
    rows = (ProviderCall.objects.filter(project=project).order_by().values("model_name")
            .annotate(calls=Count("id"), failed_calls=Count("id", filter=Q(failed=True)),
                      unpriced_calls=Count("id", filter=Q(cost__isnull=True, failed=False)),
                      prompt_tokens=Sum("prompt_tokens"), completion_tokens=Sum("completion_tokens"),
                      cost=Sum("cost")).order_by("model_name"))
    fields = ("calls", "failed_calls", "unpriced_calls", "prompt_tokens", "completion_tokens")
    by_model = [{"model": r["model_name"], **{f: r[f] or 0 for f in fields},
                 "cost": str((r["cost"] or Decimal(0)).quantize(MICRO))} for r in rows]
    totals = {"model": "all", **{f: sum(line[f] for line in by_model) for f in fields},
              "cost": str(sum((Decimal(line["cost"]) for line in by_model), Decimal(0)).quantize(MICRO))}
    return {"totals": totals, "by_model": by_model}


def recent_calls(project: Project, limit: int = 50) -> QuerySet[ProviderCall]:
    return ProviderCall.objects.filter(project=project).select_related("user")[:limit]
