import pytest
from django.test import Client

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def login(client, username, password):
    return client.post("/accounts/login/", {"username": username, "password": password})


@pytest.mark.smoke
def test_login_with_the_right_password_lands_on_the_project_list(client):
    UserFactory(username="alice")
    response = login(client, "alice", PASSWORD)
    assert response.status_code == 302
    assert response["Location"] == "/projects/"
    assert client.get("/projects/").status_code == 200


def test_wrong_password_shows_an_inline_error_and_no_session(client):
    UserFactory(username="alice")
    response = login(client, "alice", "not-the-password")
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert client.get("/projects/").status_code == 302  # still anonymous: redirected to login


def test_repeated_wrong_passwords_lock_the_account_out_even_with_the_right_one(client):
    UserFactory(username="alice")
    for _ in range(5):
        login(client, "alice", "wrong")
    response = login(client, "alice", PASSWORD)
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert client.get("/projects/").status_code == 302


def test_spoofed_forwarded_for_does_not_reset_the_lockout(client):
    UserFactory(username="alice")
    for attempt in range(5):
        client.post("/accounts/login/", {"username": "alice", "password": "wrong"},
                    HTTP_X_FORWARDED_FOR=f"10.0.0.{attempt}")
    response = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD},
                           HTTP_X_FORWARDED_FOR="10.9.9.9")
    assert response.status_code == 429


def test_lockout_of_one_account_does_not_lock_out_another_from_the_same_address(client):
    UserFactory(username="alice")
    UserFactory(username="bob")
    for _ in range(5):
        login(client, "alice", "wrong")
    assert login(client, "bob", PASSWORD).status_code == 302


def test_login_without_a_csrf_token_is_refused():
    UserFactory(username="alice")
    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 403


def test_session_api_write_without_a_csrf_token_is_refused(viewer):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(viewer)
    response = strict.post("/api/projects/", {"name": "Sneaky"}, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_logout_needs_a_post_and_ends_the_session(client, viewer):
    client.force_login(viewer)
    assert client.get("/accounts/logout/").status_code == 405
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert client.get("/projects/").status_code == 302


def test_password_change_keeps_this_session_and_ends_the_others(viewer):
    this, other = Client(), Client()
    this.force_login(viewer)
    other.force_login(viewer)
    new_password = "a-brand-new-passphrase-42"
    response = this.post("/accounts/password/", {"old_password": PASSWORD, "new_password1": new_password,
                                                 "new_password2": new_password})
    assert response.status_code == 302
    assert this.get("/projects/").status_code == 200
    assert other.get("/projects/").status_code == 302
    viewer.refresh_from_db()
    assert viewer.check_password(new_password)


def test_password_change_with_a_wrong_old_password_shows_the_error(client, viewer):
    client.force_login(viewer)
    response = client.post("/accounts/password/", {"old_password": "nope", "new_password1": "x-y-z-1234567",
                                                   "new_password2": "x-y-z-1234567"})
    assert response.status_code == 200
    assert "Your old password was entered incorrectly" in response.content.decode()


def test_wrong_old_passwords_at_password_change_lock_the_account_out_as_failed_logins_do(client):
    alice = UserFactory(username="alice")
    client.force_login(alice)
    answers = [client.post("/accounts/password/", {"old_password": f"guess-{n}", "new_password1": "N3w-passphrase-ok",
                                                   "new_password2": "N3w-passphrase-ok"}).status_code
               for n in range(5)]
    assert answers[:4] == [200, 200, 200, 200] and answers[4] == 429
    # Locked out: the right old password changes nothing now, and logging in is refused too.
    locked = client.post("/accounts/password/", {"old_password": PASSWORD, "new_password1": "N3w-passphrase-ok",
                                                 "new_password2": "N3w-passphrase-ok"})
    assert locked.status_code == 429
    alice.refresh_from_db()
    assert alice.check_password(PASSWORD)
    assert login(Client(), "alice", PASSWORD).status_code == 429


def test_the_right_old_password_changes_it(client):
    alice = UserFactory(username="alice")
    client.force_login(alice)
    answer = client.post("/accounts/password/", {"old_password": PASSWORD, "new_password1": "N3w-passphrase-ok",
                                                 "new_password2": "N3w-passphrase-ok"})
    assert answer.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password("N3w-passphrase-ok")
