"""The tenant trio, their agents, OAuth clients and tokens, shared by the API and platform tests.

acme: owner alice, operator bob, viewer dave; agents `vault` (authenticated)
and `lobby` (public), both echo. globex: owner charlie; agent `vault`
(authenticated). Import the `trio` fixture into a test module to use it.
"""

import secrets
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from oauth2_provider.models import AccessToken, set_token_value

from agents.models import Agent
from tasks_app.models import Message, Task
from tenants.models import Application, Membership, Tenant
from tenants.services import oauth_client_create

# All but a2a:approve, which would make every test token an approver (tests/platform/test_approvals.py).
ALL_SCOPES = [
    "a2a:invoke",
    "a2a:read",
    "a2a:push",
    "agents:manage",
    "tasks:read",
    "tasks:act",
    "agents:publish",
]
PASSWORD = "correct horse battery staple"


@dataclass
class Client:
    client_id: str
    secret: str


@dataclass
class Trio:
    base_url: str
    tenants: dict[str, Tenant] = field(default_factory=dict)
    users: dict = field(default_factory=dict)
    clients: dict[str, Client] = field(default_factory=dict)

    def client_credentials_token(self, client: Client, scope: str | None = None) -> httpx.Response:
        """A token by the real client-credentials flow at /o/token/."""
        data = {"grant_type": "client_credentials"}
        if scope:
            data["scope"] = scope
        return httpx.post(
            f"{self.base_url}/o/token/", data=data, auth=(client.client_id, client.secret), timeout=30
        )

    def token(
        self, tenant: str, scopes=ALL_SCOPES, *, user: str | None = None, expires_in: int = 3600
    ) -> str:
        """A token as DOT stores it, with any scopes or expiry a test needs (e.g. already expired).

        Issued to the tenant's own client, or (with `user`) to its interactive client for that person.
        """
        client_id = self.clients[f"{tenant}-interactive" if user else tenant].client_id
        raw = secrets.token_urlsafe(24)
        token = AccessToken(
            application=Application.objects.get(client_id=client_id),
            user=self.users[user] if user else None,
            scope=" ".join(scopes),
            expires=timezone.now() + timedelta(seconds=expires_in),
        )
        set_token_value(token, raw)
        token.save()
        return raw

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def _user(username: str):
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_password(PASSWORD)
        user.save()
    return user


def _client(tenant: Tenant, name: str, **options) -> Client:
    """One client per name, made once per session; its secret kept from creation."""
    Application.objects.filter(tenant=tenant, name=name).delete()
    app, secret = oauth_client_create(
        tenant=tenant, actor="system:test", name=name, scopes=ALL_SCOPES, **options
    )
    return Client(client_id=app.client_id, secret=secret or "")


@pytest.fixture(scope="session")
def trio(server, stored) -> Trio:
    trio = Trio(base_url=server.base_url)
    for slug in ("acme", "globex"):
        trio.tenants[slug], _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug.title()})
    members = [("alice", "acme", "owner"), ("bob", "acme", "operator"), ("dave", "acme", "viewer")]
    members.append(("charlie", "globex", "owner"))
    for username, tenant, role in members:
        trio.users[username] = _user(username)
        Membership.objects.update_or_create(
            user=trio.users[username], tenant=trio.tenants[tenant], defaults={"role": role}
        )
    for tenant, slug, visibility in [
        ("acme", "vault", Agent.Visibility.AUTHENTICATED),
        ("acme", "lobby", Agent.Visibility.PUBLIC),
        ("acme", "quiet", Agent.Visibility.AUTHENTICATED),
        ("globex", "vault", Agent.Visibility.AUTHENTICATED),
    ]:
        # `quiet` never finishes a turn (the test handler "silent"): its tasks wait for operators.
        handler = "silent" if slug == "quiet" else "echo"
        Agent.objects.update_or_create(
            tenant=trio.tenants[tenant],
            slug=slug,
            defaults={"name": slug.title(), "handler": handler, "visibility": visibility, "enabled": True},
        )
    for slug in ("acme", "globex"):
        tenant = trio.tenants[slug]
        trio.clients[slug] = _client(tenant, "test client")
        trio.clients[f"{slug}-second"] = _client(tenant, "second test client")
        trio.clients[f"{slug}-interactive"] = _client(
            tenant, "interactive test client", grant="authorization-code", redirect_uris="http://127.0.0.1/cb"
        )
    return trio


def new_message(text: str = "hi", **fields) -> dict:
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": f"msg-{uuid.uuid4()}",
            "parts": [{"text": text}],
            **fields,
        }
    }


def waiting_task(trio) -> str:
    """A task on `quiet` (its handler never finishes a turn); set_state puts it where an operator acts."""
    answer = httpx.post(
        f"{trio.base_url}/a2a/acme/quiet/",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {**new_message("need you"), "configuration": {"returnImmediately": True}},
        },
        headers={"A2A-Version": "1.0", **trio.auth(trio.token("acme"))},
        timeout=30,
    )
    return answer.json()["result"]["task"]["id"]


def set_state(task_id: str, state: str) -> None:
    """The task in `state` (input-required, say), once its turn is over."""
    # Wait until the worker is done with the turn, then stand in for a handler that asked for input.
    deadline = time.monotonic() + 20
    while Message.objects.filter(task_id=task_id, turn__in=["pending", "running"]).exists():
        assert time.monotonic() < deadline, "the turn never finished"
        time.sleep(0.1)
    Task.objects.filter(pk=task_id).update(state=state)
