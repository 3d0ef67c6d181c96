from django.urls import path

from apps.training import api

urlpatterns = [
    path("projects/<int:project_id>/jobs/", api.ProjectJobListLaunchApi.as_view(), name="api-jobs"),
    path("projects/<int:project_id>/jobs/estimate/", api.JobEstimateApi.as_view(), name="api-jobs-estimate"),
    path("jobs/<int:job_id>/", api.JobDetailApi.as_view(), name="api-job"),
    path("jobs/<int:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("jobs/<int:job_id>/resume/", api.JobResumeApi.as_view(), name="api-job-resume"),
    path("jobs/<int:job_id>/copy/", api.JobCopyApi.as_view(), name="api-job-copy"),
    path("jobs/<int:job_id>/metrics/", api.JobMetricsApi.as_view(), name="api-job-metrics"),
    path("projects/<int:project_id>/sweeps/", api.ProjectSweepListLaunchApi.as_view(), name="api-sweeps"),
    path("sweeps/<int:sweep_id>/", api.SweepDetailApi.as_view(), name="api-sweep"),
    path("sweeps/<int:sweep_id>/cancel/", api.SweepCancelApi.as_view(), name="api-sweep-cancel"),
]
