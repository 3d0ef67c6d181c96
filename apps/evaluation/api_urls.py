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
    path("projects/<int:project_id>/eval-suites/", api.EvalSuiteListCreateApi.as_view(), name="api-eval-suites"),
    path("projects/<int:project_id>/eval-suites/<int:suite_id>/", api.EvalSuiteDetailApi.as_view(),
         name="api-eval-suite"),
    path("projects/<int:project_id>/eval-suites/<int:suite_id>/runs/", api.EvalRunLaunchApi.as_view(),
         name="api-eval-suite-launch"),
    path("projects/<int:project_id>/eval-runs/", api.EvalRunListApi.as_view(), name="api-eval-runs"),
    path("projects/<int:project_id>/eval-runs/<int:run_id>/", api.EvalRunDetailApi.as_view(), name="api-eval-run"),
    path("projects/<int:project_id>/eval-runs/<int:run_id>/cancel/", api.EvalRunCancelApi.as_view(),
         name="api-eval-run-cancel"),
]
