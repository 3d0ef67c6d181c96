from django.urls import path

from apps.evaluation import views

app_name = "evaluation"
urlpatterns = [
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/judges/", views.comparison_judges, name="judges"),
]
