from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid
from apps.core.http import client_ip
from apps.projects import policy, selectors, services
from apps.projects.serializers import MembershipSerializer, ProjectSerializer, ProjectWriteSerializer


class ProjectListCreateApi(ListAPIView):
    serializer_class = ProjectSerializer

    def get_queryset(self):
        include_archived = self.request.query_params.get("archived") == "1"
        return selectors.project_list(user=self.request.user, include_archived=include_archived,
                                      token=self.request.auth)

    @extend_schema(request=ProjectWriteSerializer, responses={201: ProjectSerializer})
    def post(self, request: Request) -> Response:
        if request.auth is not None:
            # Tokens act inside projects; creating one is a person's act.
            raise Invalid("API tokens cannot create projects; use a logged-in session.")
        data = ProjectWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project = services.project_create(user=request.user, name=data.validated_data.get("name", ""),
                                          description=data.validated_data.get("description", ""),
                                          ip_address=client_ip(request))
        return Response(ProjectSerializer(project).data, status=status.HTTP_201_CREATED)


class ProjectDetailApi(APIView):
    @extend_schema(responses=ProjectSerializer)
    def get(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        return Response(ProjectSerializer(project).data)

    @extend_schema(request=ProjectWriteSerializer, responses=ProjectSerializer)
    def patch(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = ProjectWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        project = services.project_update(user=request.user, project=project, token=request.auth,
                                          ip_address=client_ip(request), **data.validated_data)
        return Response(ProjectSerializer(project).data)


class ProjectMemberListApi(ListAPIView):
    serializer_class = MembershipSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], token=self.request.auth)
        return selectors.project_members(project=project)
