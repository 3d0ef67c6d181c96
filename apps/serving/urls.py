from django.urls import path

from apps.serving import views

app_name = "serving"
urlpatterns = [
    path("projects/<int:project_id>/playground/", views.playground, name="playground"),
]
