from django.urls import path

from apps.evaluation import api

urlpatterns = [
    path("projects/<int:project_id>/judges/", api.JudgeListCreateApi.as_view(), name="api-judges"),
    path("projects/<int:project_id>/judges/<int:judge_id>/", api.JudgeDetailApi.as_view(), name="api-judge"),
    path("projects/<int:project_id>/judges/<int:judge_id>/estimate/", api.JudgeEstimateApi.as_view(),
         name="api-judge-estimate"),
    path("projects/<int:project_id>/judges/<int:judge_id>/runs/", api.JudgeRunLaunchApi.as_view(),
         name="api-judge-launch"),
    path("projects/<int:project_id>/judge-runs/", api.JudgeRunListApi.as_view(), name="api-judge-runs"),
    path("projects/<int:project_id>/judge-runs/<int:run_id>/", api.JudgeRunDetailApi.as_view(),
         name="api-judge-run"),
    path("projects/<int:project_id>/judge-runs/<int:run_id>/cancel/", api.JudgeRunCancelApi.as_view(),
         name="api-judge-run-cancel"),
    path("projects/<int:project_id>/judge-calibration/", api.CalibrationPolicyApi.as_view(),
         name="api-judge-calibration"),
    path("projects/<int:project_id>/teacher-runs/", api.TeacherRunListLaunchApi.as_view(), name="api-teacher-runs"),
    path("projects/<int:project_id>/teacher-runs/estimate/", api.TeacherEstimateApi.as_view(),
         name="api-teacher-estimate"),
    path("projects/<int:project_id>/teacher-runs/<int:run_id>/", api.TeacherRunDetailApi.as_view(),
         name="api-teacher-run"),
    path("projects/<int:project_id>/teacher-runs/<int:run_id>/cancel/", api.TeacherRunCancelApi.as_view(),
         name="api-teacher-run-cancel"),
]
