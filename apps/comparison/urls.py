from django.urls import path

from apps.comparison import views

app_name = "comparison"
urlpatterns = [
    path("comparisons/", views.all_comparisons, name="all"),
    path("projects/<int:project_id>/comparisons/", views.comparison_list, name="list"),
    path("projects/<int:project_id>/comparisons/new/", views.comparison_create, name="create"),
    path("projects/<int:project_id>/leaderboard/", views.project_leaderboard, name="project_leaderboard"),
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/", views.comparison_detail, name="detail"),
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/vote/", views.comparison_vote, name="vote"),
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/leaderboard/", views.comparison_leaderboard,
         name="leaderboard"),
    path("projects/<int:project_id>/comparisons/<int:comparison_id>/<str:action>/", views.comparison_action,
         name="action"),
]
