from django.urls import path

from apps.serving import openai_api

urlpatterns = [
    path("models", openai_api.models, name="openai-models"),
    path("chat/completions", openai_api.chat_completions, name="openai-chat-completions"),
    path("completions", openai_api.completions, name="openai-completions"),
]
