"""What every websocket consumer shares: authentication, a policy check, a message budget."""

import asyncio
import logging
import time
from importlib import import_module

from asgiref.sync import sync_to_async
from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model

from apps.core import connections
from apps.core.errors import DomainError
from apps.projects import policy

logger = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403  # access revoked while connected
CLOSE_NOT_FOUND = 4404  # no such object, or not visible to this principal
CLOSE_RATE_LIMITED = 4429
CLOSE_TOO_MANY_SOCKETS = 4430  # this person (or address) already holds the most sockets allowed
MAX_MESSAGE_BYTES = 4096


class PolicyConsumer(AsyncJsonWebsocketConsumer):
    """Subclasses say which groups to join and implement `allowed()` with the policy layer.

    An anonymous handshake is refused before accept (nothing joined, nothing sent). A principal
    the policy refuses is accepted and closed at once with CLOSE_NOT_FOUND, nothing sent.
    Clients may send at most `max_messages_per_window` messages per `window_s`; more closes
    the socket with CLOSE_RATE_LIMITED.
    """

    window_s = 10.0
    max_messages_per_window = 20

    async def connect(self):
        self.joined: list[str] = []
        self.window_started = time.monotonic()
        self.messages_in_window = 0
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.counted = dict(user_id=user.pk, address=connections.scope_address(self.scope), channel=self.channel_name)
        over = await sync_to_async(connections.admit, thread_sensitive=False)(**self.counted)
        if over:
            self.counted = None
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY_SOCKETS,
                             reason=f"Too many open connections for this {'account' if over == 'user' else 'address'}.")
            return
        self.refresher = asyncio.ensure_future(self._keep_counted())
        if not await database_sync_to_async(self.allowed)():
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        for group in self.groups_to_join():
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
        await self.accept()
        if await database_sync_to_async(self._single_sign_on)():
            self.session_checker = asyncio.ensure_future(self._keep_session_checked())
        await self.on_accepted()

    async def disconnect(self, code):
        await self._leave_groups()
        for task in (getattr(self, "refresher", None), getattr(self, "session_checker", None)):
            if task is not None:
                task.cancel()
        if getattr(self, "counted", None):
            await sync_to_async(connections.release, thread_sensitive=False)(**self.counted)
            self.counted = None

    async def _keep_counted(self) -> None:
        while True:
            await asyncio.sleep(connections.REFRESH_S)
            try:
                await sync_to_async(connections.refresh, thread_sensitive=False)(**self.counted)
            except Exception:  # Redis away for a moment: the entry outlives a few missed refreshes
                logger.warning("could not refresh the open-socket count", exc_info=True)

    def _single_sign_on(self) -> bool:
        from apps.accounts.services import sso_session

        return sso_session(self.scope["session"])

    async def _keep_session_checked(self) -> None:
        """A socket of a single-sign-on session re-checks the session with the provider every
        SSO_REVALIDATE_S as its page requests do (apps.accounts.sso.socket_recheck), so a session
        that only holds sockets is checked too: when the session ends (the provider refused it, a
        sign-out, the account deactivated) the socket closes with CLOSE_UNAUTHORIZED, and a
        membership its groups no longer give closes it with CLOSE_FORBIDDEN (access_revoked)."""
        from apps.accounts.services import sso_socket_recheck

        session_key = self.scope["session"].session_key
        address = connections.scope_address(self.scope)
        while True:
            try:
                # Not thread-sensitive: the provider's answer may take seconds, and must not hold up
                # every other socket's database work in this process meanwhile.
                delay = await database_sync_to_async(sso_socket_recheck, thread_sensitive=False)(
                    session_key, user_id=self.scope["user"].pk, ip_address=address)
            except Exception:  # a database or cache hiccup: try again later, the socket stays as it is
                logger.exception("could not re-check the session of a websocket")
                delay = 5.0
            if delay is None:
                await self.close(code=CLOSE_UNAUTHORIZED)
                return
            await asyncio.sleep(max(delay, 1.0))

    async def _current_user(self):
        """This socket's user as its session stands now: the scope's copy of the session was read
        at connect and would still name the user after a sign-out ended it."""
        session = self.scope["session"]
        session._wrapped = import_module(settings.SESSION_ENGINE).SessionStore(session.session_key)
        return await get_user(self.scope)

    async def close(self, code=None, reason=None):
        if getattr(self, "closing", False):  # a session check and a revocation may both close it: once
            return
        self.closing = True
        # Leave the groups first: nothing more is forwarded once we decided to close.
        await self._leave_groups()
        await super().close(code=code, reason=reason)

    async def _leave_groups(self):
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined = []

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        now = time.monotonic()
        if now - self.window_started > self.window_s:
            self.window_started, self.messages_in_window = now, 0
        self.messages_in_window += 1
        if self.messages_in_window > self.max_messages_per_window:
            await self.close(code=CLOSE_RATE_LIMITED)
            return
        if bytes_data is not None or text_data is None or len(text_data) > MAX_MESSAGE_BYTES:
            await self.send_json({"type": "error", "detail": f"Send JSON text messages under {MAX_MESSAGE_BYTES} bytes."})
            return
        try:
            content = await self.decode_json(text_data)
        except ValueError:
            await self.send_json({"type": "error", "detail": "Malformed JSON."})
            return
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            await self.send_json({"type": "error", "detail": "Messages are objects with a string 'type'."})
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs):
        if content["type"] == "ping":
            await self.send_json({"type": "pong"})
        else:
            await self.send_json({"type": "error", "detail": f"Unknown message type {content['type']!r}."})

    async def access_revoked(self, message):
        """Sent to `user.<id>` when this person's access changed (membership removed, grant
        revoked, logout, password change): re-check the session and the policy, close if gone."""
        current = await self._current_user()  # anonymous once the session ended or the password changed
        if not current.is_authenticated or current.pk != self.scope["user"].pk:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        if not await database_sync_to_async(self.allowed)():
            await self.close(code=CLOSE_FORBIDDEN)

    # --- for subclasses ----------------------------------------------------------------------
    def allowed(self) -> bool:
        """Sync (runs in a thread): may this socket's user see what it asked for?"""
        raise NotImplementedError

    def permits(self, permission: str, obj) -> bool:
        """The policy's answer for this socket's user, read fresh: the connect-time user object
        caches permissions from before a change, and the account may have been deactivated."""
        user = get_user_model().objects.filter(pk=self.scope["user"].pk, is_active=True).first()
        if obj is None or user is None:
            return False
        try:
            policy.require(user, permission, obj)
        except DomainError:
            return False
        return True

    def groups_to_join(self) -> list[str]:
        return []

    async def on_accepted(self) -> None:
        pass
