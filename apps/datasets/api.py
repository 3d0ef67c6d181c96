from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import PermissionDenied
from apps.core.http import client_ip
from apps.datasets import services
from apps.datasets.models import Dataset
from apps.datasets.serializers import DatasetCreateSerializer, DatasetSerializer
from apps.projects import policy


class ProjectDatasetListCreateApi(ListAPIView):
    serializer_class = DatasetSerializer

    def get_queryset(self):
        """All the project's datasets for a role with `dataset.view`; otherwise the ones granted
        to this member one by one; 403 when that is none."""
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], token=token)
        datasets = policy.visible_in_project(user, Dataset, project, "dataset.view", token)
        if not policy.can(user, "dataset.view", project, token) and not datasets.exists():
            raise PermissionDenied("dataset.view")
        return datasets.order_by("name", "id")

    @extend_schema(request=DatasetCreateSerializer, responses={201: DatasetSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = DatasetCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dataset = services.dataset_create(user=request.user, project=project, token=request.auth,
                                          ip_address=client_ip(request), **data.validated_data)
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetailApi(APIView):
    @extend_schema(responses=DatasetSerializer)
    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth)
        return Response(DatasetSerializer(dataset).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, dataset_id: int) -> Response:
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth)
        services.dataset_delete(user=request.user, dataset=dataset, token=request.auth, ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SharedDatasetListApi(ListAPIView):
    """Datasets granted to me one by one, across projects."""

    serializer_class = DatasetSerializer

    def get_queryset(self):
        token = self.request.auth
        datasets = policy.shared_with(self.request.user, Dataset, "dataset.view", token)
        return datasets.order_by("name", "id")
