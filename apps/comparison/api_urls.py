from django.urls import path

from apps.comparison import api

urlpatterns = [
    path("projects/<int:project_id>/comparisons/", api.ProjectComparisonListCreateApi.as_view(),
         name="api-comparisons"),
    path("projects/<int:project_id>/leaderboard/", api.ProjectLeaderboardApi.as_view(), name="api-project-leaderboard"),
    path("comparisons/<int:comparison_id>/", api.ComparisonDetailApi.as_view(), name="api-comparison"),
    path("comparisons/<int:comparison_id>/cancel/", api.ComparisonCancelApi.as_view(), name="api-comparison-cancel"),
    path("comparisons/<int:comparison_id>/grid/", api.ComparisonGridApi.as_view(), name="api-comparison-grid"),
    path("comparisons/<int:comparison_id>/leaderboard/", api.ComparisonLeaderboardApi.as_view(),
         name="api-comparison-leaderboard"),
    path("comparisons/<int:comparison_id>/pairs/next/", api.NextPairApi.as_view(), name="api-comparison-next-pair"),
    path("comparisons/<int:comparison_id>/votes/", api.VoteApi.as_view(), name="api-comparison-votes"),
    path("comparisons/<int:comparison_id>/export/", api.ExportApi.as_view(), name="api-comparison-export"),
]
