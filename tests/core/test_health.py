import pytest
from channels.layers import channel_layers
from django.test import override_settings

from workbench.celery import app as celery_app


@pytest.mark.smoke
def test_healthz_answers_without_touching_services(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.smoke
@pytest.mark.django_db
def test_readyz_reports_database_broker_and_channel_layer_reachable(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"database": "ok", "broker": "ok", "channel_layer": "ok"}


@pytest.mark.django_db
def test_readyz_is_unavailable_when_the_channel_layer_is_unreachable(client):
    unreachable = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                               "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}}
    with override_settings(CHANNEL_LAYERS=unreachable):
        channel_layers.backends.clear()
        response = client.get("/readyz")
    channel_layers.backends.clear()
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["channel_layer"].startswith("error:")
    assert body["checks"]["database"] == "ok"
    assert "127.0.0.1:1" not in response.content.decode()  # no connection details leak


@pytest.mark.django_db
def test_readyz_is_unavailable_when_the_broker_is_unreachable(client):
    original = celery_app.conf.broker_url
    celery_app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get("/readyz")
    finally:
        celery_app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("error:")
