"""stream.follow abandons its generation however early its follower goes. A socket closed right after
"started" cancels the follower while it is still subscribing to the generation's group (a Redis round
trip): the queued generation must end as cancelled then too, not stay queued. The real channel layer,
its call held open so that the cancellation lands inside it."""

import asyncio
from contextlib import aclosing

import pytest
from channels.layers import get_channel_layer

from apps.serving import services, stream
from apps.serving.models import Generation
from tests.comparison.factories import placeholder_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.mark.parametrize("cancelled_in", ["new_channel", "group_add", "generation_enqueue"])
def test_a_follower_cancelled_while_it_subscribes_abandons_its_queued_generation(project, owner, monkeypatch,
                                                                                cancelled_in):
    monkeypatch.setattr(services, "generation_enqueue", lambda generation_id: None)  # no worker takes it
    generation = Generation.objects.create(project=project, model=placeholder_model(project), user=owner,
                                           source="playground", prompt="Hello")
    layer = get_channel_layer()

    async def scenario() -> None:
        entered, never = asyncio.Event(), asyncio.Event()

        async def held(*args, **kwargs):
            entered.set()
            await never.wait()  # the follower is cancelled here

        if cancelled_in == "generation_enqueue":
            monkeypatch.setattr(stream, "database_sync_to_async", lambda function: held)
        else:
            monkeypatch.setattr(layer, cancelled_in, held)

        async def follower() -> None:
            async with aclosing(stream.follow(generation.pk)) as events:
                async for _ in events:
                    pass

        task = asyncio.create_task(follower())
        await asyncio.wait_for(entered.wait(), 10)
        monkeypatch.undo()  # the release runs on the real layer and the real database
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    generation.refresh_from_db()
    assert (generation.state, generation.finish_reason, generation.cancel_requested) == ("succeeded", "cancelled", True)
