"""The console's live feed: one WebSocket per open page, on the tenant's group.

Messages are small notes (task id, state, seq); the page fetches what it shows
over HTTP, so the socket never carries agent output.

Access is checked when the socket opens, again when a `member.revoked` note
names the socket's user (a2a_platform/console/signals.py), and again before a
note is forwarded when the last check is older than RECHECK_SECONDS, for
changes that sent no signal (a queryset .update(), raw SQL). A socket whose
user lost the tenant closes with 4403 and forwards nothing more.

The socket lives no longer than the sign-in it opened with: signing out sends
a `session.ended` note to the session's group, which closes the socket with
4401, and each re-check also asks whether the session still holds (not
signed out, not expired, its password not changed since).
"""

import hashlib
import logging
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from a2a_platform.console.access import console_access
from tasks_app.events import tenant_group_name
from tenants.access import session_holds

log = logging.getLogger(__name__)

# At most one access query per socket in this many seconds, however many notes come.
RECHECK_SECONDS = 10.0
# Not (or no longer) allowed to see this tenant.
CLOSE_REVOKED = 4403
# Refused at connect: not a member, or no such tenant.
CLOSE_REFUSED = 4404
# The sign-in the socket opened with is over (signed out, expired, password changed). The
# page opens a new socket: a browser that changed its password or signed in again holds a
# new session key, and its new socket is accepted; one signed out gets CLOSE_NO_SIGN_IN.
CLOSE_SIGNED_OUT = 4401
# Opened without a sign-in: the page says it is signed out, and stops trying.
CLOSE_NO_SIGN_IN = 4402


def session_group_name(session_key: str) -> str:
    """The group of one sign-in's sockets. The session key is a secret: the group is named by its digest."""
    return "console.session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def _connect_access(user, slug: str):
    access = console_access(user, slug)
    return access, (user.pk if access is not None else None)


def _refusal(user_pk, slug: str, session_key: str) -> int | None:
    """Why the socket may not go on (its close code), or None.

    None: its sign-in holds, and its user, as stored now, may open the tenant.
    """
    user = get_user_model().objects.filter(pk=user_pk).first()
    if user is None:
        return CLOSE_REVOKED
    if not session_holds(session_key, user):
        return CLOSE_SIGNED_OUT
    return None if console_access(user, slug) is not None else CLOSE_REVOKED


class TenantFeedConsumer(AsyncJsonWebsocketConsumer):
    joined: tuple[str, ...] = ()
    user_pk = None
    slug = None
    session_key = None
    checked_at = 0.0
    revoked = False

    async def connect(self):
        slug = self.scope["url_route"]["kwargs"]["tenant"]
        if not self.scope["user"].is_authenticated:
            # Accepted first, for the close code to reach the page (a handshake refused is 1006
            # there, which it retries).
            await self.accept()
            await self.close(code=CLOSE_NO_SIGN_IN)
            return
        access, user_pk = await database_sync_to_async(_connect_access)(self.scope["user"], slug)
        if access is None:
            # Same refusal for "not a member" and "no such tenant".
            await self.close(code=CLOSE_REFUSED)
            return
        self.slug, self.user_pk = slug, user_pk
        self.session_key = self.scope["session"].session_key
        self.checked_at = time.monotonic()
        self.joined = (tenant_group_name(access.tenant.pk), session_group_name(self.session_key))
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.leave_groups()
        # Refused, revoked or gone: the in-process layer forgets the channel (it keeps a note
        # of each channel it received on). Redis's unsubscribes as the receive is cancelled.
        forget = getattr(self.channel_layer, "forget_channel", None)
        if forget is not None:
            forget(self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # The browser only listens. Anything sent is dropped as it is: decoding it as JSON
        # first (AsyncJsonWebsocketConsumer's receive) crashed the consumer on a frame that
        # is not, before disconnect() could leave the group.
        return

    async def tenant_task(self, event):
        if self.revoked:
            return
        if time.monotonic() - self.checked_at >= RECHECK_SECONDS and not await self.check_access():
            return
        await self.send_json({"task": event["task"], "state": event["state"], "seq": event["seq"]})

    async def member_revoked(self, event):
        if self.revoked or event.get("user") != self.user_pk:
            return
        # Check rather than close blindly: a superuser keeps every tenant, and a
        # user may have been added back since.
        await self.check_access()

    async def session_ended(self, event):
        # Sent when this socket's sign-in signs out (a2a_platform/console/signals.py).
        if not self.revoked:
            await self.stop(code=CLOSE_SIGNED_OUT)

    async def check_access(self) -> bool:
        """Check the sign-in and the user's access now; close the socket if either is gone."""
        try:
            refusal = await database_sync_to_async(_refusal)(self.user_pk, self.slug, self.session_key)
        except Exception:
            log.exception("Could not check user %s's access to tenant %s", self.user_pk, self.slug)
            # Not knowing is not being allowed, but it is no refusal either: 1011 makes
            # the page reconnect, and the new socket is checked afresh at connect.
            await self.stop(code=1011)
            return False
        self.checked_at = time.monotonic()
        if refusal is not None:
            await self.stop(code=refusal)
        return refusal is None

    async def stop(self, code: int):
        self.revoked = True
        await self.leave_groups()
        await self.close(code=code)

    async def leave_groups(self):
        joined, self.joined = self.joined, ()
        for group in joined:
            await self.channel_layer.group_discard(group, self.channel_name)
