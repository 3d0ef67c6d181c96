from django.urls import path

from apps.providers import api

urlpatterns = [
    path("providers/", api.ProviderListCreateApi.as_view(), name="api-providers"),
    path("providers/<int:provider_id>/", api.ProviderDetailApi.as_view(), name="api-provider"),
    path("providers/<int:provider_id>/fetch-models/", api.ProviderFetchModelsApi.as_view(),
         name="api-provider-fetch-models"),
    path("providers/<int:provider_id>/enablements/", api.ProviderEnablementListCreateApi.as_view(),
         name="api-provider-enablements"),
    path("providers/<int:provider_id>/enablements/<int:enablement_id>/", api.ProviderEnablementDetailApi.as_view(),
         name="api-provider-enablement"),
    path("provider-allowlist/", api.AllowlistApi.as_view(), name="api-provider-allowlist"),
    path("provider-allowlist/<int:network_id>/", api.AllowlistDetailApi.as_view(), name="api-provider-network"),
    path("projects/<int:project_id>/provider-models/", api.ProjectProviderModelsApi.as_view(),
         name="api-project-provider-models"),
    path("projects/<int:project_id>/provider-usage/", api.ProjectProviderUsageApi.as_view(),
         name="api-project-provider-usage"),
    path("projects/<int:project_id>/provider-costs/", api.ProjectProviderCostsApi.as_view(),
         name="api-project-provider-costs"),
    path("projects/<int:project_id>/provider-chat/", api.ProjectProviderChatApi.as_view(),
         name="api-project-provider-chat"),
    path("projects/<int:project_id>/provider-policy/", api.ProjectProviderPolicyApi.as_view(),
         name="api-project-provider-policy"),
]
