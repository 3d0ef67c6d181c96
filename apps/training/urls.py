from django.urls import path

from apps.training import views

app_name = "training"
urlpatterns = [
    path("jobs/", views.all_jobs, name="all"),
    path("projects/<int:project_id>/jobs/", views.job_list, name="list"),
    path("projects/<int:project_id>/jobs/new/", views.job_launch, name="launch"),
    path("projects/<int:project_id>/jobs/compare/", views.job_compare, name="compare"),
    path("projects/<int:project_id>/sweeps/", views.sweep_list, name="sweeps"),
    path("projects/<int:project_id>/sweeps/<int:sweep_id>/", views.sweep_detail, name="sweep"),
    path("projects/<int:project_id>/sweeps/<int:sweep_id>/cancel/", views.sweep_cancel, name="sweep-cancel"),
    path("projects/<int:project_id>/jobs/<int:job_id>/", views.job_detail, name="detail"),
    path("projects/<int:project_id>/jobs/<int:job_id>/<str:action>/", views.job_action, name="action"),
]
