from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import services
from apps.accounts.models import ApiToken
from apps.core.errors import NotFound
from apps.core.http import client_ip
from apps.projects import policy


class MeSerializer(serializers.ModelSerializer):
    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "is_staff"]


class MeApi(APIView):
    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        return Response(MeSerializer(request.user).data)


class TokenSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True, allow_null=True)
    user = serializers.CharField(source="user.username", read_only=True)
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "user", "project", "permissions", "key_id", "created_at", "expires_at",
                  "last_used_at", "revoked_at", "active"]


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret: shown once, never again.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    permissions = serializers.ListField(child=serializers.CharField(max_length=64), max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


def _created(request: Request, project=None) -> Response:
    data = TokenCreateSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    api_token, raw = services.token_create(user=request.user, project=project, token=request.auth,
                                           ip_address=client_ip(request), **data.validated_data)
    body = TokenSerializer(api_token).data | {"token": raw}
    return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class PersonalTokenListCreateApi(ListAPIView):
    serializer_class = TokenSerializer

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user, project__isnull=True).select_related("user")

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenCreatedSerializer})
    def post(self, request: Request) -> Response:
        return _created(request)


class ProjectTokenListCreateApi(ListAPIView):
    serializer_class = TokenSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "token.manage",
                                     token=self.request.auth)
        return project.api_tokens.select_related("user")

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenCreatedSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        return _created(request, project)


class TokenRevokeApi(APIView):
    @extend_schema(responses=TokenSerializer)
    def delete(self, request: Request, token_id: int) -> Response:
        api_token = ApiToken.objects.select_related("project", "user").filter(pk=token_id).first()
        if api_token is None:
            raise NotFound()
        api_token = services.token_revoke(user=request.user, api_token=api_token, token=request.auth,
                                          ip_address=client_ip(request))
        return Response(TokenSerializer(api_token).data)
