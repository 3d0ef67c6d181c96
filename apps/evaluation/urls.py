from django.urls import path

from apps.evaluation import views

app_name = "evaluation"
urlpatterns = [
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/judges/", views.comparison_judges, name="judges"),
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/rate/", views.rate_outputs, name="rate"),
    path("projects/<int:project_id>/judges/<int:judge_id>/versions/<int:version_id>/rate/", views.rate_rows,
         name="rate_rows"),
    path("projects/<int:project_id>/judges/<int:judge_id>/versions/<int:version_id>/prefer/", views.prefer_rows,
         name="prefer_rows"),
    path("projects/<int:project_id>/eval-suites/", views.eval_suites, name="suites"),
    path("projects/<int:project_id>/judges/", views.version_judges, name="version_judges"),
]
