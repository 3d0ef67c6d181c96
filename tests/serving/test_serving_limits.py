"""Fair sharing of /v1 (apps/serving/limits.py): generations at once and tokens a minute, per API
token and per project, kept in the real Redis; through the live server, a real inference worker and
the official `openai` client. While the worker is paused (SIGSTOP: a busy worker, deterministically)
the requests admitted hold their slots, which is when the next one must be refused."""

import multiprocessing
import os
import signal
import threading
import time
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

import openai
import pytest
from django.conf import settings

from apps.registry.services import model_register, run_inspection
from apps.serving import limits
from apps.serving.models import Generation
from tests.factories import MembershipFactory
from tests.serving.test_openai_api import project_token

QUESTION = [{"role": "user", "content": "what is the capital of france ?"}]


@pytest.fixture
def client_for(live_asgi):
    def make(raw: str, timeout: float = 60) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=raw, max_retries=0, timeout=timeout)
    return make


@contextmanager
def paused(worker):
    """The inference worker stopped (it takes no request) until the block ends."""
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(worker.pid, signal.SIGCONT)


def wait_until(check, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def in_thread(call) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        try:
            outcome["reply"] = call()
        except Exception as exc:  # the test asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def refusal(call) -> openai.RateLimitError:
    with pytest.raises(openai.RateLimitError) as caught:
        call()
    return caught.value


def ask(api: openai.OpenAI, model, **extra):
    return api.chat.completions.create(model=model.name, messages=QUESTION, max_tokens=8, temperature=0, **extra)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_the_next_concurrent_request_over_a_tokens_or_projects_limit_gets_429_while_others_are_served(
        owner, project, other_project, tiny_model, inference_worker, client_for):
    project.serving_max_concurrent_per_token, project.serving_max_concurrent_per_project = 2, 3
    project.save()
    first, second, third = (client_for(project_token(owner, project)) for _ in range(3))
    MembershipFactory(project=other_project, user=owner, role="owner")
    elsewhere = model_register(user=owner, project=other_project, name="Tiny elsewhere", path=tiny_model.weights_path)
    run_inspection(elsewhere.pk)
    other = client_for(project_token(owner, other_project))

    with paused(inference_worker):
        held = [in_thread(lambda: list(ask(first, tiny_model, stream=True))) for _ in range(2)]
        wait_until(lambda: limits.running(project.pk) == 2)
        over_token = refusal(lambda: ask(first, tiny_model, stream=True))
        held.append(in_thread(lambda: ask(second, tiny_model)))  # another token of the project: admitted
        wait_until(lambda: limits.running(project.pk) == 3)
        over_project = refusal(lambda: ask(third, tiny_model))
        held.append(in_thread(lambda: ask(other, elsewhere)))  # another project: its own limits
        wait_until(lambda: limits.running(other_project.pk) == 1)
    for thread, _ in held:
        thread.join(60)

    for refused, limit in ((over_token, "2 generations running at once for this API token"),
                           (over_project, "3 generations running at once for this project")):
        assert refused.status_code == 429 and refused.code == "rate_limit_exceeded"
        assert int(refused.response.headers["Retry-After"]) >= 1
        assert limit in refused.message
    for _, outcome in held:
        assert "error" not in outcome, outcome
    streamed = [outcome["reply"] for _, outcome in held[:2]]
    assert all(chunks[-1].choices[0].finish_reason in ("stop", "length") for chunks in streamed)
    assert held[2][1]["reply"].choices[0].message.content is not None
    assert held[3][1]["reply"].usage.completion_tokens > 0
    # every slot is back once the answers ended: the token may run two again
    assert limits.running(project.pk) == limits.running(other_project.pk) == 0
    assert ask(first, tiny_model).usage.total_tokens > 0
    assert Generation.objects.filter(project=project).count() == 4  # nothing was created for the refused


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_tokens_per_minute_are_reserved_at_admission_and_counted_when_the_answer_ends(
        owner, project, tiny_model, inference_worker, client_for):
    project.serving_tokens_per_minute_per_token = 100
    project.save()
    api, other_token = client_for(project_token(owner, project)), client_for(project_token(owner, project))

    def chat(client, max_tokens: int):
        return client.chat.completions.create(model=tiny_model.name, messages=QUESTION, max_tokens=max_tokens)

    alone_over = refusal(lambda: chat(api, 101))
    assert "The request alone is over the limit of 100 tokens per minute for this API token" in alone_over.message

    used = chat(api, 8).usage.total_tokens
    assert 0 < used < 100  # its prompt and completion are what the window holds now, not its reservation of 8
    refused = refusal(lambda: chat(api, 100 - used + 1))
    assert refused.code == "rate_limit_exceeded" and "100 tokens per minute for this API token" in refused.message
    assert 1 <= int(refused.response.headers["Retry-After"]) <= limits.WINDOW_S
    # what is left of the minute can still be asked for, and another token has its own minute
    assert chat(api, 100 - used).usage.total_tokens > 0
    assert chat(other_token, 5).usage.total_tokens > 0

    # the project's minute is shared by its tokens
    project_used = sum(g.prompt_tokens + g.completion_tokens for g in Generation.objects.filter(project=project))
    project.serving_tokens_per_minute_per_project = project_used + 10
    project.save()
    third = client_for(project_token(owner, project))
    over_project = refusal(lambda: chat(third, 11))
    assert f"{project_used + 10} tokens per minute for this project" in over_project.message
    assert chat(third, 10).usage.total_tokens > 0


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_a_request_its_client_abandons_gives_its_slot_back(owner, project, tiny_model, inference_worker, client_for):
    project.serving_max_concurrent_per_token = 1
    project.save()
    raw = project_token(owner, project)
    impatient = client_for(raw, timeout=1)
    with paused(inference_worker):
        with pytest.raises(openai.APITimeoutError):
            list(ask(impatient, tiny_model, stream=True))
        # the server saw the client go: the slot is back and the generation will never run
        wait_until(lambda: limits.running(project.pk) == 0)
        wait_until(lambda: Generation.objects.get().finish_reason == "cancelled")
    assert ask(client_for(raw), tiny_model).choices[0].finish_reason in ("stop", "length")
    assert limits.running(project.pk) == 0


@pytest.mark.timeout(60)
def test_slots_expire_as_a_backstop_and_a_window_says_when_it_has_room(db, project):
    project.serving_max_concurrent_per_project, project.serving_tokens_per_minute_per_project = 2, 100
    before = time.time()
    lease = limits.acquire(project, None, slots=2, reserve=60)
    running_key = limits._keys(project.pk, None)[1]
    expiries = [score for _, score in limits._redis().zrange(running_key, 0, -1, withscores=True)]
    assert len(expiries) == 2 and all(e >= before + settings.INFERENCE_TIMEOUT_S for e in expiries)
    with pytest.raises(limits.LimitExceeded) as over:
        limits.acquire(project, None, slots=1, reserve=1)
    assert over.value.field == "serving_max_concurrent_per_project"
    limits.release(lease, 30)  # the real count replaces the reservation of 60
    assert limits.running(project.pk) == 0
    kept = limits.acquire(project, None, slots=1, reserve=70)
    with pytest.raises(limits.LimitExceeded) as over:
        limits.acquire(project, None, slots=1, reserve=1)
    assert over.value.field == "serving_tokens_per_minute_per_project"
    assert 1 <= over.value.retry_after_s <= limits.WINDOW_S
    limits.release(kept, None)
    assert limits.running(project.pk) == 0


@pytest.mark.timeout(60)
@pytest.mark.django_db
def test_an_admin_sets_a_projects_serving_limits_and_bad_values_get_a_400_naming_the_field(
        client, admin, scientist, project):
    url = f"/api/projects/{project.pk}/"
    client.force_login(admin)
    set_ = client.patch(url, {"serving_max_concurrent_per_token": 4, "serving_tokens_per_minute_per_project": 9000},
                        content_type="application/json")
    assert set_.status_code == 200
    assert set_.json()["serving_max_concurrent_per_token"] == 4
    assert set_.json()["serving_tokens_per_minute_per_project"] == 9000
    project.refresh_from_db()
    assert limits.limits_for(project) == {
        "serving_max_concurrent_per_token": 4,
        "serving_max_concurrent_per_project": settings.SERVING_MAX_CONCURRENT_PER_PROJECT,
        "serving_tokens_per_minute_per_token": settings.SERVING_TOKENS_PER_MINUTE_PER_TOKEN,
        "serving_tokens_per_minute_per_project": 9000}
    for field in limits.LIMITS:
        for bad in (-1, 0, 1.5, "many", 10**12, True, [3], {"n": 3}):
            response = client.patch(url, {field: bad}, content_type="application/json")
            assert response.status_code == 400 and field in response.json(), (field, bad)
    assert client.patch(url, {"serving_max_concurrent_per_token": None},
                        content_type="application/json").json()["serving_max_concurrent_per_token"] is None
    client.force_login(scientist)
    assert client.patch(url, {"serving_max_concurrent_per_token": 100},
                        content_type="application/json").status_code == 403


def _take_slots(project, tries: int, start, taken) -> None:
    """In a child process (a web process of its own): try for a slot `tries` times, keep what it gets."""
    start.wait()
    got = 0
    for _ in range(tries):
        try:
            limits.acquire(project, None, slots=1, reserve=1)
            got += 1
        except limits.LimitExceeded:
            pass
    taken.put(got)


@pytest.mark.timeout(60)
def test_processes_racing_for_the_last_slots_never_take_more_than_the_limit():
    # attributes only: the children touch Redis, not the database
    project = SimpleNamespace(pk=uuid.uuid4().int % 10**9, serving_max_concurrent_per_token=None,
                              serving_max_concurrent_per_project=5, serving_tokens_per_minute_per_token=None,
                              serving_tokens_per_minute_per_project=None)
    context = multiprocessing.get_context("fork")
    start, taken = context.Event(), context.Queue()
    children = [context.Process(target=_take_slots, args=(project, 10, start, taken)) for _ in range(4)]
    for child in children:
        child.start()
    start.set()
    counts = [taken.get(timeout=30) for _ in children]
    for child in children:
        child.join(10)
    assert sum(counts) == 5 and limits.running(project.pk) == 5
    limits._redis().delete(limits._keys(project.pk, None)[1])


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_playground_answer_cancelled_gives_its_projects_slot_back(scientist, project, tiny_model, inference_worker):
    import asyncio

    from tests.projects.test_activity_socket import headers_for, run
    from tests.serving.test_playground_socket import playground_socket

    outcome, headers = {}, headers_for(scientist)

    async def scenario():
        socket = playground_socket(project, headers)
        assert (await socket.connect(timeout=10))[0]
        with paused(inference_worker):
            await socket.send_json_to({"type": "generate", "model": tiny_model.pk, "messages": QUESTION,
                                       "params": {"max_new_tokens": 50}})
            started = await socket.receive_json_from(timeout=10)
            outcome["running_before"] = limits.running(project.pk)
            await socket.send_json_to({"type": "cancel", "id": started["id"]})
            await asyncio.sleep(0.5)  # the consumer records the cancel (no reply) before the worker resumes
        while (reply := await socket.receive_json_from(timeout=30))["type"] == "delta":
            pass
        outcome["reply"] = reply
        for _ in range(100):
            if limits.running(project.pk) == 0:
                break
            await asyncio.sleep(0.05)
        outcome["running_after"] = limits.running(project.pk)
        await socket.disconnect()

    run(scenario)
    assert outcome["running_before"] == 1
    assert outcome["reply"]["type"] == "done" and outcome["reply"]["result"]["finish_reason"] == "cancelled"
    assert outcome["running_after"] == 0
