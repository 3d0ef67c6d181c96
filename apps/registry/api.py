import tempfile
import zipfile

from django.http import FileResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid, NotFound
from apps.core.http import client_ip
from apps.core.pagination import NewestFirstPagination
from apps.projects import policy
from apps.registry import precisions, selectors, services
from apps.registry.models import CatalogueModel, ModelExport, PrecisionMeasurement, RegisteredModel
from apps.registry.serializers import (
    AliasSerializer,
    AliasSetSerializer,
    CatalogueEnableSerializer,
    CatalogueModelSerializer,
    CatalogueRegisterSerializer,
    CatalogueUpdateSerializer,
    CatalogueUploadSerializer,
    MemoryEstimateQuerySerializer,
    ModelExportSerializer,
    ModelExportStartSerializer,
    ModelMergeSerializer,
    ModelRegisterSerializer,
    ModelSerializer,
    ModelUpdateSerializer,
    PrecisionMeasurementSerializer,
    ProjectCatalogueSerializer,
    ShareSerializer,
)


class ProjectModelListCreateApi(ListAPIView):
    serializer_class = ModelSerializer

    def get_queryset(self):
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], token=token)
        policy.require(user, "model.view", project, token)
        return policy.visible_in_project(user, RegisteredModel, project, "model.view", token).order_by("name", "id")

    @extend_schema(request=ModelRegisterSerializer, responses={201: ModelSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = ModelRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = services.model_register(user=request.user, project=project, token=request.auth,
                                        ip_address=client_ip(request), **data.validated_data)
        return Response(ModelSerializer(model, context={"request": request}).data, status=status.HTTP_201_CREATED)


class ModelDetailApi(APIView):
    @extend_schema(responses=ModelSerializer)
    def get(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        return Response(ModelSerializer(model, context={"request": request}).data)

    @extend_schema(request=ModelUpdateSerializer, responses=ModelSerializer)
    def patch(self, request: Request, model_id: int) -> Response:
        """Change the model's serving options: the precision the inference workers load it in."""
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = ModelUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = precisions.serving_precision_set(user=request.user, model=model, token=request.auth,
                                                 precision=data.validated_data["serving_precision"],
                                                 ip_address=client_ip(request))
        return Response(ModelSerializer(model, context={"request": request}).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        services.model_delete(user=request.user, model=model, token=request.auth, ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AdapterMergeApi(APIView):
    """Merge an adapter into its base: a standalone safetensors model, written by a worker."""

    @extend_schema(request=ModelMergeSerializer, responses={202: ModelSerializer})
    def post(self, request: Request, model_id: int) -> Response:
        adapter = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = ModelMergeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = services.adapter_merge(user=request.user, adapter=adapter, name=data.validated_data["name"],
                                       token=request.auth, ip_address=client_ip(request))
        return Response(ModelSerializer(model, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)


class ModelExportsApi(ListAPIView):
    """Export the model for deployment (an adapter merged into its base first): a zipped safetensors
    directory, or one GGUF file (f16, q8_0) for llama.cpp and Ollama, written by a worker, loaded back
    and checked against the model it came from; GET lists the model's exports, newest first."""

    serializer_class = ModelExportSerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        model = policy.get_object(self.request.user, RegisteredModel, self.kwargs["model_id"], "model.view",
                                  self.request.auth)
        policy.require(self.request.user, "model.download", model, self.request.auth)
        return model.exports.all()

    @extend_schema(request=ModelExportStartSerializer, responses={202: ModelExportSerializer})
    def post(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = ModelExportStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.model_export_start(user=request.user, model=model, export_format=data.validated_data["format"],
                                          token=request.auth, ip_address=client_ip(request))
        return Response(ModelExportSerializer(job).data, status=status.HTTP_202_ACCEPTED)


def _model_export(request: Request, export_id) -> ModelExport:
    job = ModelExport.objects.filter(pk=export_id).first()
    if job is None:
        raise NotFound()
    # A deleted model's exports go with it; another project's answer 404 as its model does.
    model = policy.get_object(request.user, RegisteredModel, job.model_id, "model.view", request.auth)
    policy.require(request.user, "model.download", model, request.auth)
    job.model = model
    return job


class ModelExportApi(APIView):
    @extend_schema(responses=ModelExportSerializer)
    def get(self, request: Request, export_id: int) -> Response:
        return Response(ModelExportSerializer(_model_export(request, export_id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, export_id: int) -> Response:
        services.model_export_delete(user=request.user, export=_model_export(request, export_id), token=request.auth,
                                     ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelExportDownloadApi(APIView):
    @extend_schema(responses={(200, "application/octet-stream"): bytes})
    def get(self, request: Request, export_id: int) -> FileResponse:
        job = _model_export(request, export_id)
        if job.state != ModelExport.State.SUCCEEDED:
            raise Invalid(f"This export is {job.state}; download it once it has succeeded.", field="state")
        return FileResponse(open(job.path, "rb"), as_attachment=True, filename=job.filename,
                            content_type="application/octet-stream")


class AdapterDownloadApi(APIView):
    """An adapter as a zip of its PEFT directory: `PeftModel.from_pretrained` loads it unchanged."""

    @extend_schema(responses={(200, "application/zip"): bytes})
    def get(self, request: Request, model_id: int) -> FileResponse:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        policy.require(request.user, "model.download", model, request.auth)  # weights leave with it, as data does
        files = services.adapter_archive_files(model)
        archive = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # adapters are megabytes
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for path, name in files:
                zipped.write(path, name)
        archive.seek(0)
        filename = (files[0][1].split("/")[0] if files else "adapter") + ".zip"
        return FileResponse(archive, as_attachment=True, filename=filename, content_type="application/zip")


class ModelMemoryEstimateApi(APIView):
    """Memory to run or LoRA-train this model, estimated from its metadata (nothing loaded)."""

    @extend_schema(parameters=[MemoryEstimateQuerySerializer], responses=dict)
    def get(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        query = MemoryEstimateQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(services.model_memory_estimate(model=model, **query.validated_data))


# --- the site's catalogue --------------------------------------------------------------------------

@extend_schema(tags=["models"])
class CatalogueListCreateApi(ListAPIView):
    """Site admins: the models every project may enable, registered once."""

    serializer_class = CatalogueModelSerializer

    def get_queryset(self):
        services.require_site_staff(self.request.user, self.request.auth)
        return CatalogueModel.objects.order_by("name", "id")

    @extend_schema(request=CatalogueRegisterSerializer, responses={201: CatalogueModelSerializer})
    def post(self, request: Request) -> Response:
        services.require_site_staff(request.user, request.auth)
        data = CatalogueRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.catalogue_register(user=request.user, token=request.auth, ip_address=client_ip(request),
                                            **data.validated_data)
        return Response(CatalogueModelSerializer(entry).data, status=status.HTTP_201_CREATED)


class CatalogueUploadApi(APIView):
    """Site admins: upload a base model into the catalogue (safetensors + config/tokenizer, or one
    GGUF); a worker checks and loads it before it is offered (status checking, then ready)."""

    parser_classes = [MultiPartParser]

    @extend_schema(request={"multipart/form-data": CatalogueUploadSerializer}, responses={201: CatalogueModelSerializer})
    def post(self, request: Request) -> Response:
        services.require_site_staff(request.user, request.auth)
        data = CatalogueUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.catalogue_upload(user=request.user, token=request.auth, ip_address=client_ip(request),
                                          **data.validated_data)
        return Response(CatalogueModelSerializer(entry).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["models"])
class CatalogueDetailApi(APIView):
    @extend_schema(request=CatalogueUpdateSerializer, responses=CatalogueModelSerializer)
    def patch(self, request: Request, entry_id: int) -> Response:
        services.require_site_staff(request.user, request.auth)
        entry = CatalogueModel.objects.filter(pk=entry_id).first()
        if entry is None:
            raise NotFound()
        data = CatalogueUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.catalogue_update(user=request.user, entry=entry, token=request.auth,
                                          ip_address=client_ip(request), **data.validated_data)
        return Response(CatalogueModelSerializer(entry).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, entry_id: int) -> Response:
        services.require_site_staff(request.user, request.auth)
        entry = CatalogueModel.objects.filter(pk=entry_id).first()
        if entry is None:
            raise NotFound()
        services.catalogue_delete(user=request.user, entry=entry, token=request.auth, ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProjectCatalogueApi(ListAPIView):
    """The catalogue as a project sees it; its admins enable a model (nothing copied)."""

    serializer_class = ProjectCatalogueSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "model.view",
                                     token=self.request.auth)
        return selectors.catalogue_for_project(project)

    @extend_schema(request=CatalogueEnableSerializer, responses={201: ModelSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = CatalogueEnableSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = services.catalogue_enable(user=request.user, project=project, token=request.auth,
                                          entry_id=data.validated_data["catalogue_model"],
                                          ip_address=client_ip(request))
        return Response(ModelSerializer(model, context={"request": request}).data, status=status.HTTP_201_CREATED)


class ProjectCatalogueDisableApi(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: Request, project_id: int, entry_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        services.catalogue_disable(user=request.user, project=project, entry_id=entry_id, token=request.auth,
                                   ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- adapters shared with other projects -----------------------------------------------------------

class AdapterSharesApi(ListAPIView):
    """The other projects an adapter is shared with (its row in each)."""

    serializer_class = ShareSerializer

    def get_queryset(self):
        user, token = self.request.user, self.request.auth
        adapter = policy.get_object(user, RegisteredModel, self.kwargs["model_id"], "model.view", token)
        return services.adapter_shares(user=user, adapter=adapter, token=token)

    @extend_schema(request=ShareSerializer, responses={201: ShareSerializer})
    def post(self, request: Request, model_id: int) -> Response:
        adapter = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = ShareSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        shared = services.adapter_share(user=request.user, adapter=adapter, token=request.auth,
                                        project_id=data.validated_data["project_id"], ip_address=client_ip(request))
        return Response(ShareSerializer(shared).data, status=status.HTTP_201_CREATED)


class AdapterShareDetailApi(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: Request, model_id: int, target_id: int) -> Response:
        adapter = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        services.adapter_unshare(user=request.user, adapter=adapter, project_id=target_id, token=request.auth,
                                 ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- aliases ----------------------------------------------------------------------------------------

class ModelAliasesApi(ListAPIView):
    """A model's aliases: what clients ask for as name@alias, and the version each points at."""

    serializer_class = AliasSerializer

    def get_queryset(self):
        model = policy.get_object(self.request.user, RegisteredModel, self.kwargs["model_id"], "model.view",
                                  self.request.auth)
        return model.aliases.select_related("model", "version", "updated_by").order_by("name", "id")


class ModelAliasApi(APIView):
    """Create an alias or move it onto another version (one audited action); remove it."""

    @extend_schema(request=AliasSetSerializer, responses=AliasSerializer)
    def put(self, request: Request, model_id: int, alias: str) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        data = AliasSetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        moved = services.alias_set(user=request.user, model=model, name=alias, token=request.auth,
                                   ip_address=client_ip(request), **data.validated_data)
        return Response(AliasSerializer(moved).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, model_id: int, alias: str) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        services.alias_delete(user=request.user, model=model, name=alias, token=request.auth,
                              ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class PrecisionMeasurementsApi(ListAPIView):
    """Measure the model in each serving precision (fp32, bf16, int8) on an inference worker: decode
    tokens/s and perplexity on a fixed reference text, which `auto` follows; GET lists the model's
    measurements, newest first."""

    serializer_class = PrecisionMeasurementSerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        model = policy.get_object(self.request.user, RegisteredModel, self.kwargs["model_id"], "model.view",
                                  self.request.auth)
        return model.precision_measurements.all()

    @extend_schema(request=None, responses={202: PrecisionMeasurementSerializer})
    def post(self, request: Request, model_id: int) -> Response:
        model = policy.get_object(request.user, RegisteredModel, model_id, "model.view", request.auth)
        job = precisions.precision_measurement_start(user=request.user, model=model, token=request.auth,
                                                     ip_address=client_ip(request))
        return Response(PrecisionMeasurementSerializer(job).data, status=status.HTTP_202_ACCEPTED)


def _precision_measurement(request: Request, job_id) -> PrecisionMeasurement:
    job = PrecisionMeasurement.objects.filter(pk=job_id).first()
    if job is None:
        raise NotFound()
    # Another project's answers 404, as its model does.
    job.model = policy.get_object(request.user, RegisteredModel, job.model_id, "model.view", request.auth)
    return job


class PrecisionMeasurementApi(APIView):
    @extend_schema(responses=PrecisionMeasurementSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        return Response(PrecisionMeasurementSerializer(_precision_measurement(request, job_id)).data)


class PrecisionMeasurementCancelApi(APIView):
    """A queued measurement ends at once; a running one stops before its next precision."""

    @extend_schema(request=None, responses=PrecisionMeasurementSerializer)
    def post(self, request: Request, job_id: int) -> Response:
        job = precisions.precision_measurement_cancel(user=request.user, job=_precision_measurement(request, job_id),
                                                      token=request.auth, ip_address=client_ip(request))
        return Response(PrecisionMeasurementSerializer(job).data)
