"""The console's live feed: one WebSocket per open page, on the tenant's group.

Messages are small notes (task id, state, seq); the page fetches what it shows
over HTTP, so the socket never carries agent output.
"""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from a2a_platform.console.access import console_access
from tasks_app.events import tenant_group_name


class TenantFeedConsumer(AsyncJsonWebsocketConsumer):
    group = None

    async def connect(self):
        slug = self.scope["url_route"]["kwargs"]["tenant"]
        access = await database_sync_to_async(console_access)(self.scope["user"], slug)
        if access is None:
            # Same refusal for "not a member" and "no such tenant".
            await self.close(code=4404)
            return
        self.group = tenant_group_name(access.tenant.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # The browser only listens.
        return

    async def tenant_task(self, event):
        await self.send_json({"task": event["task"], "state": event["state"], "seq": event["seq"]})
