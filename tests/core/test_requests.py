"""What every request meets: friendly 404s, body limits, security headers."""

import pytest
import requests
from django.conf import settings


@pytest.mark.smoke
@pytest.mark.django_db
def test_unknown_page_gets_the_friendly_404_page(client, viewer):
    client.force_login(viewer)
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html
    assert 'href="/projects/"' in html  # the layout, with navigation, not a bare error
    assert "Traceback" not in html


@pytest.mark.django_db
def test_unknown_api_url_gets_json_404(client, viewer):
    client.force_login(viewer)
    response = client.get("/api/no-such-endpoint/")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy_without_inline_script_or_eval(client):
    response = client.get("/accounts/login/")
    policy = response["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert "unsafe-eval" not in policy
    assert all("unsafe-inline" not in value for name, value in directives.items() if name != "style-src")
    assert directives["frame-ancestors"] == "'none'"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"


def test_oversized_body_with_content_length_is_refused_with_413(live_asgi):
    body = b"x" * (settings.MAX_REQUEST_BODY_BYTES + 1)
    response = requests.post(f"{live_asgi}/api/projects/", data=body,
                             headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 413
    assert "limit is" in response.json()["detail"]
    # Answered before Django, with the security headers Django's middleware gives every other answer.
    assert (response.headers["X-Content-Type-Options"], response.headers["X-Frame-Options"]) == ("nosniff", "DENY")
    assert response.headers["Content-Security-Policy"] == "default-src 'none'"


def test_oversized_chunked_body_without_length_is_refused_with_413(live_asgi):
    chunk = b"y" * (1024 * 1024)
    chunks_needed = settings.MAX_REQUEST_BODY_BYTES // len(chunk) + 2
    sent = 0

    def body():
        nonlocal sent
        for _ in range(chunks_needed):
            sent += 1
            yield chunk

    try:
        response = requests.post(f"{live_asgi}/accounts/login/", data=body(), timeout=30)
    except requests.ConnectionError:
        pytest.fail("the server dropped the connection instead of answering 413")
    assert response.status_code == 413
    assert "Request body too large" in response.text


def test_malformed_content_length_is_a_clear_400(live_asgi):
    import socket

    host, port = live_asgi.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /api/projects/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12abc\r\n\r\n")
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 400")


def test_a_chunked_upload_without_a_length_is_refused_at_once_with_411(live_asgi, owner, project):
    from apps.accounts.services import token_create
    from apps.datasets.models import Dataset, ImportJob

    _, raw_token = token_create(user=owner, name="upload", permissions=["project.view", "dataset.view",
                                                                          "dataset.import"], project=project)
    dataset = Dataset.objects.create(project=project, name="Chunked", created_by=owner)
    boundary = "wbboundary"
    parts = [f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"rows.jsonl\"\r\n"
             "Content-Type: application/x-ndjson\r\n\r\n".encode(), b'{"prompt": "hi"}\n' * 100,
             f"\r\n--{boundary}--\r\n".encode()]
    response = requests.post(f"{live_asgi}/api/projects/{project.pk}/datasets/{dataset.pk}/imports/",
                             data=iter(parts), timeout=30,
                             headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                      "Authorization": f"Bearer {raw_token}"})
    assert response.status_code == 411
    assert "Content-Length" in response.json()["detail"]
    assert not ImportJob.objects.filter(dataset=dataset).exists()
