from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.core import views as core_views

api_patterns = [
    path("", include("apps.accounts.api_urls")),
    path("", include("apps.projects.api_urls")),
    path("", include("apps.datasets.api_urls")),
    path("", include("apps.registry.api_urls")),
    path("", include("apps.serving.api_urls")),
    path("", include("apps.training.api_urls")),
    path("", include("apps.annotation.api_urls")),
    path("", include("apps.comparison.api_urls")),
    path("", include("apps.monitoring.api_urls")),
    path("", include("apps.providers.api_urls")),
    path("", include("apps.evaluation.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file, so the CSP needs no inline script.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    # First: the API is most of the requests, and each pattern tried before it costs a little.
    path("api/", include(api_patterns)),
    path("", core_views.home, name="home"),
    path("accounts/", include("apps.accounts.urls")),
    path("projects/", include("apps.projects.urls")),
    path("", include("apps.datasets.urls")),
    path("", include("apps.registry.urls")),
    path("", include("apps.training.urls")),
    path("", include("apps.serving.urls")),
    path("", include("apps.annotation.urls")),
    # Before comparison's: its catch-all action route (comparisons/<id>/<action>/) would take judges/.
    path("", include("apps.evaluation.urls")),
    path("", include("apps.comparison.urls")),
    path("", include("apps.monitoring.urls")),
    path("", include("apps.providers.urls")),
    # OpenAI-compatible: the paths its clients expect (base_url = <server>/v1).
    path("v1/", include("apps.serving.urls_openai")),
    path("admin/", admin.site.urls),
]

handler404 = "apps.core.views.not_found"
handler500 = "apps.core.views.server_error"
