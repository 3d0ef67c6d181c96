
from django.http import StreamingHttpResponse
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid, NotFound
from apps.core.http import client_ip
from apps.core.pagination import KeysetPagination
from apps.projects import policy, selectors, services
from apps.projects.models import Membership, Role
from apps.projects.permissions import BUILTIN_ROLES, PERMISSIONS, grantable_model
from apps.projects.serializers import (
    AuditEventSerializer,
    GrantCreateSerializer,
    GrantSerializer,
    MemberAddSerializer,
    MemberRoleSerializer,
    MembershipSerializer,
    PermissionCatalogueSerializer,
    ProjectArchiveSerializer,
    ProjectDeleteSerializer,
    ProjectSerializer,
    ProjectWriteSerializer,
    RoleSerializer,
    RoleWriteSerializer,
)
from workers.ingest.export_formats import EXPORT_FORMATS, STREAM_FORMATS, names_in_words


class PermissionCatalogueApi(APIView):
    """Every permission and the built-in roles."""

    @extend_schema(responses=PermissionCatalogueSerializer)
    def get(self, request: Request) -> Response:
        return Response({
            "permissions": [{"name": name, "description": text} for name, text in PERMISSIONS.items()],
            "roles": [{"key": r.key, "name": r.name, "description": r.description,
                       "permissions": sorted(r.permissions)} for r in BUILTIN_ROLES.values()],
        })


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

    @extend_schema(request=ProjectDeleteSerializer, responses={204: None})
    def delete(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = ProjectDeleteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.project_delete(user=request.user, project=project, token=request.auth,
                                ip_address=client_ip(request), **data.validated_data)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProjectArchiveApi(APIView):
    @extend_schema(request=ProjectArchiveSerializer, responses=ProjectSerializer)
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = ProjectArchiveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project = services.project_set_archived(user=request.user, project=project, token=request.auth,
                                                ip_address=client_ip(request), **data.validated_data)
        return Response(ProjectSerializer(project).data)


class MemberListCreateApi(ListAPIView):
    serializer_class = MembershipSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], token=self.request.auth)
        return selectors.project_members(project=project)

    @extend_schema(request=MemberAddSerializer, responses={201: MembershipSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = MemberAddSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = services.member_add(actor=request.user, project=project, token=request.auth,
                                         ip_address=client_ip(request), **data.validated_data)
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)


def _membership(request: Request, project_id: int, membership_id: int) -> Membership:
    project = policy.get_project(request.user, project_id, token=request.auth)
    membership = selectors.project_members(project=project).filter(pk=membership_id).first()
    if membership is None:
        raise NotFound()
    return membership


class MemberDetailApi(APIView):
    @extend_schema(request=MemberRoleSerializer, responses=MembershipSerializer)
    def patch(self, request: Request, project_id: int, membership_id: int) -> Response:
        membership = _membership(request, project_id, membership_id)
        data = MemberRoleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = services.member_change_role(actor=request.user, membership=membership, token=request.auth,
                                                 ip_address=client_ip(request), **data.validated_data)
        return Response(MembershipSerializer(membership).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, project_id: int, membership_id: int) -> Response:
        membership = _membership(request, project_id, membership_id)
        services.member_remove(actor=request.user, membership=membership, token=request.auth,
                               ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RoleListCreateApi(ListAPIView):
    serializer_class = RoleSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], token=self.request.auth)
        return selectors.project_roles(project=project)

    @extend_schema(request=RoleWriteSerializer, responses={201: RoleSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = RoleWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        role = services.role_create(actor=request.user, project=project, token=request.auth,
                                    ip_address=client_ip(request), name=data.validated_data.get("name", ""),
                                    permissions=data.validated_data.get("permissions", []),
                                    description=data.validated_data.get("description", ""))
        return Response(RoleSerializer(role).data, status=status.HTTP_201_CREATED)


def _role(request: Request, project_id: int, role_id: int) -> Role:
    project = policy.get_project(request.user, project_id, token=request.auth)
    role = project.roles.filter(pk=role_id).first()
    if role is None:
        raise NotFound()
    return role


class RoleDetailApi(APIView):
    @extend_schema(request=RoleWriteSerializer, responses=RoleSerializer)
    def patch(self, request: Request, project_id: int, role_id: int) -> Response:
        role = _role(request, project_id, role_id)
        data = RoleWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        role = services.role_update(actor=request.user, role=role, token=request.auth,
                                    ip_address=client_ip(request), **data.validated_data)
        return Response(RoleSerializer(role).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, project_id: int, role_id: int) -> Response:
        role = _role(request, project_id, role_id)
        services.role_delete(actor=request.user, role=role, token=request.auth, ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class GrantListCreateApi(ListAPIView):
    serializer_class = GrantSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "member.manage",
                                     token=self.request.auth)
        return selectors.project_grants(project=project)

    @extend_schema(request=GrantCreateSerializer, responses={201: GrantSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = GrantCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        kind = data.validated_data["object_type"]
        target = grantable_model(kind).objects.filter(project=project, pk=data.validated_data["object_id"]).first()
        if target is None:
            raise Invalid(f"No such {kind} in this project.", field="object_id")
        grant = services.grant_create(actor=request.user, obj=target, username=data.validated_data["username"],
                                      permission=data.validated_data["permission"], token=request.auth,
                                      ip_address=client_ip(request))
        return Response(GrantSerializer(grant).data, status=status.HTTP_201_CREATED)


class GrantDetailApi(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: Request, project_id: int, grant_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        services.grant_revoke(actor=request.user, grant_id=grant_id, project=project, token=request.auth,
                              ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


AUDIT_FILTERS = [
    OpenApiParameter("action", str, description="action prefix, e.g. 'member.' or 'token.create'"),
    OpenApiParameter("actor", str, description="username"),
    OpenApiParameter("since", str, description="ISO 8601 time, inclusive"),
    OpenApiParameter("until", str, description="ISO 8601 time, exclusive"),
]


def audit_filters(params) -> dict:
    filters = {"action": params.get("action", "")[:64], "actor": params.get("actor", "")[:150]}
    for name in ("since", "until"):
        raw = params.get(name, "")
        if raw:
            try:
                value = parse_datetime(raw)
            except ValueError:
                value = None
            if value is None:
                raise Invalid(f"'{name}' must be an ISO 8601 date-time such as 2026-01-31T12:00:00Z.", field=name)
            filters[name] = value
    return filters


class AuditPagination(KeysetPagination):
    key = ("-created_at", "-id")  # newest first, on the (project, -created_at) index


class AuditListApi(ListAPIView):
    """The project's audit log, newest first; `next` pages back in time, unmoved by new events."""

    serializer_class = AuditEventSerializer
    pagination_class = AuditPagination

    @extend_schema(parameters=AUDIT_FILTERS)
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "audit.view",
                                     token=self.request.auth)
        return selectors.audit_events(project=project, **audit_filters(self.request.query_params))


AUDIT_COLUMNS = ["created_at", "actor", "action", "target_type", "target_id", "target_repr", "ip_address",
                 "before", "after"]


def audit_export_response(events, export_format: str, filename: str) -> StreamingHttpResponse:
    """The audit log as CSV (formula-injection safe) or JSONL, streamed."""
    def row(event):
        return {"created_at": event.created_at.isoformat(), "actor": event.actor.username if event.actor else None,
                "action": event.action, "target_type": event.target_type, "target_id": event.target_id,
                "target_repr": event.target_repr, "ip_address": event.ip_address,
                "before": event.before, "after": event.after}

    fmt = EXPORT_FORMATS[export_format]
    rows = (row(event) for event in events.iterator(chunk_size=1000))
    response = StreamingHttpResponse(fmt.record_lines(AUDIT_COLUMNS, rows), content_type=fmt.content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}.{fmt.extension}"'
    return response


class AuditExportApi(APIView):
    @extend_schema(parameters=AUDIT_FILTERS, responses={(200, "text/csv"): str})
    def get(self, request: Request, project_id: int, export_format: str):
        if export_format not in STREAM_FORMATS:
            raise NotFound(f"Export formats are {names_in_words(STREAM_FORMATS)}.")
        project = policy.get_project(request.user, project_id, "audit.view", token=request.auth)
        events = selectors.audit_events(project=project, **audit_filters(request.query_params))
        return audit_export_response(events, export_format, f"audit-project-{project.pk}")
