"""The providers API. Site staff (signed in; API tokens carry project permissions only) manage
providers, their models, their projects and the address allowlist; project members list the
provider models enabled for their project, chat with them (`provider.use`) and read the usage."""

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid, NotFound
from apps.core.http import client_ip
from apps.projects import policy
from apps.providers import selectors, services
from apps.providers.access import require_site_staff
from apps.providers.models import AllowedNetwork, ProviderEnablement
from apps.providers.serializers import (
    AllowedNetworkSerializer,
    ChatReplySerializer,
    ChatSerializer,
    CostsSerializer,
    EnablementSerializer,
    EnableSerializer,
    ProviderCreateSerializer,
    ProviderModelSerializer,
    ProviderPolicySerializer,
    ProviderSerializer,
    ProviderUpdateSerializer,
    UsageSerializer,
)


class ProviderListCreateApi(ListAPIView):
    serializer_class = ProviderSerializer

    def get_queryset(self):
        require_site_staff(self.request.user, self.request.auth)
        return selectors.providers()

    @extend_schema(request=ProviderCreateSerializer, responses={201: ProviderSerializer})
    def post(self, request: Request) -> Response:
        require_site_staff(request.user, request.auth)
        data = ProviderCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        provider = services.provider_create(user=request.user, token=request.auth, ip_address=client_ip(request),
                                            **data.validated_data)
        return Response(ProviderSerializer(provider).data, status=status.HTTP_201_CREATED)


class ProviderDetailApi(APIView):
    @extend_schema(responses=ProviderSerializer)
    def get(self, request: Request, provider_id: int) -> Response:
        return Response(ProviderSerializer(services.get_provider(request.user, provider_id, request.auth)).data)

    @extend_schema(request=ProviderUpdateSerializer, responses=ProviderSerializer)
    def patch(self, request: Request, provider_id: int) -> Response:
        provider = services.get_provider(request.user, provider_id, request.auth)
        data = ProviderUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        provider = services.provider_update(user=request.user, provider=provider, token=request.auth,
                                            ip_address=client_ip(request), **data.validated_data)
        return Response(ProviderSerializer(provider).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, provider_id: int) -> Response:
        provider = services.get_provider(request.user, provider_id, request.auth)
        services.provider_delete(user=request.user, provider=provider, token=request.auth,
                                 ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProviderFetchModelsApi(APIView):
    """Ask the provider's GET /models and add what it lists."""

    @extend_schema(request=None, responses=ProviderSerializer)
    def post(self, request: Request, provider_id: int) -> Response:
        provider = services.get_provider(request.user, provider_id, request.auth)
        services.provider_models_fetch(user=request.user, provider=provider, token=request.auth,
                                       ip_address=client_ip(request))
        return Response(ProviderSerializer(provider).data)


class ProviderEnablementListCreateApi(ListAPIView):
    serializer_class = EnablementSerializer

    def get_queryset(self):
        return selectors.enablements(services.get_provider(self.request.user, self.kwargs["provider_id"],
                                                           self.request.auth))

    @extend_schema(request=EnableSerializer, responses={201: EnablementSerializer})
    def post(self, request: Request, provider_id: int) -> Response:
        provider = services.get_provider(request.user, provider_id, request.auth)
        data = EnableSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        enablement = services.provider_enable(user=request.user, provider=provider, token=request.auth,
                                              project_id=data.validated_data["project"],
                                              ip_address=client_ip(request))
        return Response(EnablementSerializer(enablement).data, status=status.HTTP_201_CREATED)


class ProviderEnablementDetailApi(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: Request, provider_id: int, enablement_id: int) -> Response:
        provider = services.get_provider(request.user, provider_id, request.auth)
        enablement = ProviderEnablement.objects.filter(provider=provider, pk=enablement_id).first()
        if enablement is None:
            raise NotFound()
        services.provider_disable_for_project(user=request.user, enablement=enablement, token=request.auth,
                                              ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AllowlistApi(ListAPIView):
    serializer_class = AllowedNetworkSerializer

    def get_queryset(self):
        require_site_staff(self.request.user, self.request.auth)
        return selectors.allowlist()

    @extend_schema(request=AllowedNetworkSerializer, responses={201: AllowedNetworkSerializer})
    def post(self, request: Request) -> Response:
        require_site_staff(request.user, request.auth)
        data = AllowedNetworkSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.allowlist_add(user=request.user, token=request.auth, ip_address=client_ip(request),
                                       network=data.validated_data["network"],
                                       note=data.validated_data.get("note", ""))
        return Response(AllowedNetworkSerializer(entry).data, status=status.HTTP_201_CREATED)


class AllowlistDetailApi(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: Request, network_id: int) -> Response:
        require_site_staff(request.user, request.auth)
        entry = AllowedNetwork.objects.filter(pk=network_id).first()
        if entry is None:
            raise NotFound()
        services.allowlist_remove(user=request.user, entry=entry, token=request.auth, ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- project-scoped -------------------------------------------------------------------------

class ProjectProviderModelsApi(ListAPIView):
    """The provider models site staff enabled for this project."""

    serializer_class = ProviderModelSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], token=self.request.auth)
        return selectors.visible_models(self.request.user, project, self.request.auth)


class ProjectProviderUsageApi(ListAPIView):
    """Requests and tokens per provider and day (UTC) over the last 30 days."""

    serializer_class = UsageSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], token=self.request.auth)
        return selectors.project_usage(self.request.user, project, token=self.request.auth)


class ProjectProviderCostsApi(APIView):
    """What the project's provider calls took and cost, in all and per provider model: each call
    is recorded with its tokens and its cost at the model's prices (set by site staff) then."""

    @extend_schema(responses={200: CostsSerializer})
    def get(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        return Response(selectors.project_costs(request.user, project, token=request.auth))


class ProjectProviderChatApi(APIView):
    """One chat completion from a provider model enabled for the project. Over the daily budget
    or the provider's rate limit: 429 with Retry-After; the provider failing: 502 with its message."""

    @extend_schema(request=ChatSerializer, responses={200: ChatReplySerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        policy.require(request.user, "provider.use", project, request.auth)
        data = ChatSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        reply = services.provider_chat(project, values.pop("provider_model"), values.pop("messages"),
                                       user=request.user, token=request.auth, **values)
        return Response(asdict(reply))


class ProjectProviderPolicyApi(APIView):
    """What the project lets leave for outside providers: at all (`allow_outside_providers`), and
    with personal data replaced by placeholders first (`redact_pii`). Changing it needs project.edit."""

    @extend_schema(responses={200: ProviderPolicySerializer})
    def get(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        policy.require(request.user, "model.view", project, request.auth)
        return Response(ProviderPolicySerializer(services.project_provider_policy(project)).data)

    @extend_schema(request=ProviderPolicySerializer, responses={200: ProviderPolicySerializer})
    def patch(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        if not isinstance(request.data, dict):
            raise Invalid("the body is a JSON object of settings", field="body")
        rules = services.provider_policy_update(user=request.user, project=project, token=request.auth,
                                                ip_address=client_ip(request), **request.data)
        return Response(ProviderPolicySerializer(rules).data)
