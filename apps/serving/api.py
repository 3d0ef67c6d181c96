"""The REST side of serving: an alias's canary rollout (start, step, roll back) and its health; a
model's serving figures per version and alias."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import NotFound
from apps.core.http import client_ip
from apps.projects import policy
from apps.registry.models import ModelAlias, RegisteredModel
from apps.registry.services import alias_canary_start, alias_canary_stop
from apps.serving.selectors import serving_metrics
from apps.serving.serializers import (
    CanarySerializer,
    CanarySetSerializer,
    ServingMetricsQuerySerializer,
    ServingMetricsSerializer,
)


def _alias(model: RegisteredModel, name: str) -> ModelAlias:
    alias = model.aliases.select_related("model", "version", "canary_version", "updated_by").filter(name=name).first()
    if alias is None:
        raise NotFound(f"“{model.name}” has no alias {name[:48]!r}.")
    return alias


def _answer(alias: ModelAlias) -> Response:
    return Response(CanarySerializer(alias).data)


class AliasCanaryApi(APIView):
    """An alias's canary: which share of callers a second version serves, its rollout steps and
    thresholds, and how both versions are doing since it started."""

    @extend_schema(responses=CanarySerializer)
    def get(self, request: Request, model_id: int, alias: str) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        return _answer(_alias(model, alias))

    @extend_schema(request=CanarySetSerializer, responses=CanarySerializer)
    def put(self, request: Request, model_id: int, alias: str) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = CanarySetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        alias_canary_start(user=request.user, model=model, name=alias, token=request.auth,
                           ip_address=client_ip(request), **data.validated_data)
        return _answer(_alias(model, alias))

    @extend_schema(responses=CanarySerializer)
    def delete(self, request: Request, model_id: int, alias: str) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        alias_canary_stop(user=request.user, model=model, name=alias, token=request.auth,
                          ip_address=client_ip(request))
        return _answer(_alias(model, alias))


class ModelServingMetricsApi(APIView):
    """Requests, errors, time to first token, latency percentiles, tokens and cost of a model and
    its versions, per version and alias, with a time series per version for charts."""

    @extend_schema(parameters=[ServingMetricsQuerySerializer], responses=ServingMetricsSerializer)
    def get(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        query = ServingMetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(ServingMetricsSerializer(serving_metrics(model, **query.validated_data)).data)
