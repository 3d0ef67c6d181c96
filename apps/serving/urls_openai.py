from django.urls import path

from apps.serving import openai_api

urlpatterns = [
    path("models", openai_api.models, name="openai-models"),
    # An API id is a slug, but a display name (spaces, a slash) still resolves.
    path("models/<path:model_id>", openai_api.model_detail, name="openai-model"),
    path("chat/completions", openai_api.chat_completions, name="openai-chat-completions"),
    path("completions", openai_api.completions, name="openai-completions"),
    path("feedback", openai_api.feedback, name="openai-feedback"),
]
