import tempfile
import zipfile

from django.http import FileResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.http import client_ip
from apps.projects import policy
from apps.registry import services
from apps.registry.models import RegisteredModel
from apps.registry.serializers import (
    MemoryEstimateQuerySerializer,
    ModelMergeSerializer,
    ModelRegisterSerializer,
    ModelSerializer,
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
