"""The REST side of serving: an alias's canary rollout (start, step, roll back) and its health; a
model's serving figures per version and alias."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import NotFound
from apps.core.http import client_ip
from apps.projects import policy
from apps.registry.models import ModelAlias, RegisteredModel
from apps.registry.services import alias_canary_start, alias_canary_stop
from apps.serving.captures import capture_settings, captures_matching, captures_to_dataset
from apps.serving.models import Classification
from apps.serving.selectors import serving_metrics
from apps.serving.serializers import (
    CanarySerializer,
    CanarySetSerializer,
    CaptureFilterSerializer,
    CaptureSerializer,
    CaptureSettingsOutSerializer,
    CaptureSettingsSerializer,
    CapturesToDatasetSerializer,
    ClassificationSerializer,
    ClassifyRequestSerializer,
    ImportQueuedSerializer,
    ServingMetricsQuerySerializer,
    ServingMetricsSerializer,
)
from apps.serving.services import classification_start


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


def _alias_of(request: Request, model_id: int, alias: str) -> ModelAlias:
    model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
    return _alias(model, alias)


class AliasCaptureSettingsApi(APIView):
    """Request logging of an alias: on or off, its sample rate, retention and redaction."""

    @extend_schema(responses=CaptureSettingsOutSerializer)
    def get(self, request: Request, model_id: int, alias: str) -> Response:
        return Response(CaptureSettingsOutSerializer(_alias_of(request, model_id, alias)).data)

    @extend_schema(request=CaptureSettingsSerializer, responses=CaptureSettingsOutSerializer)
    def put(self, request: Request, model_id: int, alias: str) -> Response:
        target = _alias_of(request, model_id, alias)
        data = CaptureSettingsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        changed = capture_settings(user=request.user, alias=target, token=request.auth, ip_address=client_ip(request),
                                   **data.validated_data)
        return Response(CaptureSettingsOutSerializer(changed).data)


class AliasCapturesApi(ListAPIView):
    """What production users asked through an alias and what they were answered (redacted when
    the alias redacts), newest first, with their feedback; filtered by version, time and feedback."""

    serializer_class = CaptureSerializer

    @extend_schema(parameters=[CaptureFilterSerializer])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        target = _alias_of(self.request, self.kwargs["model_id"], self.kwargs["alias"])
        policy.require(self.request.user, "dataset.view", target.project, self.request.auth)
        query = CaptureFilterSerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return captures_matching(target, **query.validated_data).order_by("-created_at", "-id")


class AliasCapturesDatasetApi(APIView):
    """Turn the matching captures into the next version of a dataset of the project (an import job)."""

    @extend_schema(request=CapturesToDatasetSerializer, responses={202: ImportQueuedSerializer})
    def post(self, request: Request, model_id: int, alias: str) -> Response:
        target = _alias_of(request, model_id, alias)
        data = CapturesToDatasetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        filters = dict(data.validated_data)
        job, count = captures_to_dataset(user=request.user, alias=target, dataset_id=filters.pop("dataset"),
                                  token=request.auth, ip_address=client_ip(request), **filters)
        return Response({"import_job": job.pk, "dataset": job.dataset_id, "captures": count},
                        status=status.HTTP_202_ACCEPTED)


class ModelClassifyApi(APIView):
    """Classify texts with a classifier adapter (trained with the classify method): queued on an
    `inference` worker, which answers each text's label and class probabilities; poll the returned
    classification until it has succeeded."""

    @extend_schema(request=ClassifyRequestSerializer, responses={202: ClassificationSerializer})
    def post(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = ClassifyRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = classification_start(user=request.user, model=model, texts=data.validated_data["texts"],
                                   token=request.auth)
        return Response(ClassificationSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class ClassificationApi(APIView):
    @extend_schema(responses=ClassificationSerializer)
    def get(self, request: Request, classification_id: int) -> Response:
        job = Classification.objects.filter(pk=classification_id).first()
        if job is None:
            raise NotFound()
        # Another project's answers 404 as its model does.
        model = policy.get_object(request.user, RegisteredModel, job.model_id, "model.view", request.auth)
        policy.require(request.user, "model.generate", model, request.auth)
        return Response(ClassificationSerializer(job).data)
