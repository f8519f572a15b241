"""Webhook secrets (token, credentials) are encrypted at rest and decrypted only for the webhook request.

Against the running platform and a real webhook receiver on loopback; the
database is read with plain SQL and dumped with the database's own tools.
"""

import importlib
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from types import SimpleNamespace

import httpx
import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldError
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from agents.models import Agent
from tasks_app.fields import PREFIX, Undecryptable, decrypt
from tasks_app.models import PushConfig, PushDelivery, Task
from tasks_app.push import UNDECRYPTABLE_ERROR
from tenants.models import Tenant
from tests.conftest import user_message
from tests.tasks_app.webhooks import new_path

migration_0003 = importlib.import_module("tasks_app.migrations.0003_encrypt_push_secrets")


def secrets() -> tuple[str, str]:
    return f"tok-{uuid.uuid4().hex}", f"cred-{uuid.uuid4().hex}"


def raw_columns(config_pk: int) -> tuple[str, str]:
    """token and auth_credentials as the database holds them, read with plain SQL."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT token, auth_credentials FROM tasks_app_pushconfig WHERE id = %s", [config_pk])
        return cursor.fetchone()


def waiting_task(rpc) -> str:
    """A push-ask task in INPUT_REQUIRED: its next events come only once it is answered."""
    Agent.objects.get_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="push-ask",
        defaults={"name": "push-ask", "handler": "push-ask", "visibility": Agent.Visibility.PUBLIC},
    )
    task = rpc("SendMessage", user_message("paint it", f"secret-{uuid.uuid4()}"), agent="push-ask")
    assert task["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task["result"]["task"]["id"]


def answer(rpc, task_id: str) -> None:
    done = rpc(
        "SendMessage", user_message("blue", f"secret-{uuid.uuid4()}", taskId=task_id), agent="push-ask"
    )
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", done


def create_config(rpc, task_id: str, url: str, token: str, credentials: str, config_id: str) -> dict:
    created = rpc(
        "CreateTaskPushNotificationConfig",
        {
            "taskId": task_id,
            "id": config_id,
            "url": url,
            "token": token,
            "authentication": {"scheme": "Bearer", "credentials": credentials},
        },
        agent="push-ask",
    )
    return created["result"]


def test_the_webhook_gets_the_secrets_the_database_only_ciphertext(rpc, stored, receiver):
    task_id = waiting_task(rpc)
    path = new_path()
    token, credentials = secrets()
    expected = {
        "id": "sealed",
        "taskId": task_id,
        "url": receiver.url(path),
        "authentication": {"scheme": "Bearer"},
    }
    assert create_config(rpc, task_id, receiver.url(path), token, credentials, "sealed") == expected
    answer(rpc, task_id)

    got = receiver.wait_for(path, 3)
    assert len(got) == 3
    for request in got:
        assert request["headers"]["X-A2A-Notification-Token"] == token
        assert request["headers"]["Authorization"] == f"Bearer {credentials}"

    config = PushConfig.objects.get(task_id=task_id, config_id="sealed")
    raw_token, raw_credentials = raw_columns(config.pk)
    for raw, secret in ((raw_token, token), (raw_credentials, credentials)):
        assert raw.startswith(PREFIX)
        assert secret not in raw
        assert decrypt(raw) == secret
    # The model reads the plain text: that is what the webhook request is built from.
    assert (config.token, config.auth_credentials) == (token, credentials)

    fetched = rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "sealed"}, agent="push-ask")
    listed = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}, agent="push-ask")
    assert fetched["result"] == expected
    assert listed["result"]["configs"] == [expected]
    for answered in (fetched, listed):
        assert token not in str(answered) and credentials not in str(answered)


def test_a_database_dump_holds_no_webhook_secret(rpc, stored, db_settings):
    task_id = waiting_task(rpc)
    token, credentials = secrets()
    url = f"http://127.0.0.1:9/dump-{uuid.uuid4().hex}"
    create_config(rpc, task_id, url, token, credentials, "dumped")

    if db_settings["ENGINE"].endswith("sqlite3"):
        with sqlite3.connect(db_settings["NAME"], timeout=30) as dump_source:
            dump = "\n".join(dump_source.iterdump())
    else:
        pg_dump = shutil.which("pg_dump")
        if pg_dump is None:
            pytest.skip("pg_dump is not installed")
        env = {**os.environ}
        if db_settings.get("PASSWORD"):
            env["PGPASSWORD"] = db_settings["PASSWORD"]
        args = [
            pg_dump,
            "--host",
            db_settings.get("HOST") or "127.0.0.1",
            "--port",
            str(db_settings.get("PORT") or 5432),
        ]
        args += ["--username", db_settings.get("USER") or "postgres", "--no-owner", db_settings["NAME"]]
        dump = subprocess.run(args, env=env, capture_output=True, text=True, check=True, timeout=300).stdout

    assert url in dump  # the dump does hold the config
    assert token not in dump
    assert credentials not in dump


def test_values_written_under_an_old_key_decrypt_after_rotation(rpc, stored):
    key_a, key_b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    task = Task.objects.get(
        pk=rpc("SendMessage", user_message("hi", f"rot-{uuid.uuid4()}"))["result"]["task"]["id"]
    )
    token, credentials = secrets()
    with override_settings(FIELD_ENCRYPTION_KEYS=[key_a]):
        config = PushConfig.objects.create(
            tenant_id=task.tenant_id,
            task=task,
            config_id="rotated",
            url="http://127.0.0.1:9/rotated",
            token=token,
            auth_credentials=credentials,
        )
    under_a = raw_columns(config.pk)
    try:
        # As FIELD_ENCRYPTION_KEYS="B,A" in the environment: B encrypts, both decrypt.
        with override_settings(FIELD_ENCRYPTION_KEYS=f"{key_b},{key_a}"):
            reread = PushConfig.objects.get(pk=config.pk)
            assert (reread.token, reread.auth_credentials) == (token, credentials)
            reread.save(update_fields=["token", "auth_credentials"])
        under_b = raw_columns(config.pk)
        assert under_b != under_a
        # Re-saved under B: B alone reads it now, A alone no longer does.
        with override_settings(FIELD_ENCRYPTION_KEYS=[key_b]):
            assert PushConfig.objects.get(pk=config.pk).token == token
        with override_settings(FIELD_ENCRYPTION_KEYS=[key_a]):
            lost = PushConfig.objects.get(pk=config.pk)
            assert isinstance(lost.token, Undecryptable) and isinstance(lost.auth_credentials, Undecryptable)
            assert lost.token == "" and token not in repr(lost.token)
            # Saving a config whose secrets it cannot read keeps their ciphertext as it was.
            lost.url = "http://127.0.0.1:9/rotated-2"
            lost.save()
        assert raw_columns(config.pk) == under_b
        with override_settings(FIELD_ENCRYPTION_KEYS=[key_b]):
            assert PushConfig.objects.get(pk=config.pk).auth_credentials == credentials
    finally:
        config.delete()


def test_empty_stays_empty_and_nothing_is_encrypted_twice(stored):
    field = PushConfig._meta.get_field("token")
    assert field.get_prep_value("") == ""
    assert field.from_db_value("", None, connection) == ""

    first, second = field.get_prep_value("s3cret"), field.get_prep_value("s3cret")
    assert first != second  # a fresh IV each time
    assert field.from_db_value(first, None, connection) == field.from_db_value(second, None, connection)
    assert field.from_db_value(first, None, connection) == "s3cret"

    # A caller's value that is itself ciphertext is encrypted like any other text: stored verbatim,
    # the platform would decrypt it for whoever copied it out of the database.
    stored_again = field.get_prep_value(first)
    assert stored_again != first
    assert field.from_db_value(stored_again, None, connection) == first

    # Rows from before encryption (no prefix) read as the plain text they are.
    assert field.from_db_value("legacy-token", None, connection) == "legacy-token"
    # Ciphertext never matches a lookup, so the field offers none.
    with pytest.raises(FieldError):
        PushConfig.objects.filter(token="s3cret").exists()


def test_credentials_no_key_decrypts_fail_the_delivery_with_a_clear_error(rpc, stored, receiver, server):
    task_id = waiting_task(rpc)
    path = new_path()
    token, credentials = secrets()
    create_config(rpc, task_id, receiver.url(path), token, credentials, "lost-key")
    config = PushConfig.objects.get(task_id=task_id, config_id="lost-key")
    # As if FIELD_ENCRYPTION_KEYS had lost the key these were encrypted with.
    foreign = Fernet(Fernet.generate_key())
    sealed = [PREFIX + foreign.encrypt(secret.encode()).decode() for secret in (token, credentials)]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE tasks_app_pushconfig SET token = %s, auth_credentials = %s WHERE id = %s",
            [*sealed, config.pk],
        )
    try:
        answer(rpc, task_id)

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = PushDelivery.objects.filter(config_id=config.pk).exclude(status__in=PushDelivery.OPEN)
            if done.count() >= 2:
                break
            time.sleep(0.1)
        attempts = list(
            PushDelivery.objects.filter(config_id=config.pk).exclude(status__in=PushDelivery.OPEN)
        )
        assert len(attempts) >= 2
        for attempt in attempts:
            assert attempt.status in (PushDelivery.Status.FAILED, PushDelivery.Status.GIVEN_UP)
            assert attempt.response_code is None
            assert attempt.error == UNDECRYPTABLE_ERROR
        assert receiver.received(path) == []
        # The columns are left as they were, for the day the key comes back.
        assert list(raw_columns(config.pk)) == sealed

        # The server answers for the config as usual.
        expected = {
            "id": "lost-key",
            "taskId": task_id,
            "url": receiver.url(path),
            "authentication": {"scheme": "Bearer"},
        }
        fetched = rpc(
            "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "lost-key"}, agent="push-ask"
        )
        assert fetched["result"] == expected
        listed = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}, agent="push-ask")
        assert listed["result"]["configs"] == [expected]

        # And the console's task page, which lists the delivery attempts with their configs.
        password = uuid.uuid4().hex
        username = f"push-root-{uuid.uuid4().hex[:8]}"
        get_user_model().objects.create_superuser(username=username, password=password)
        with httpx.Client(base_url=server.base_url, timeout=30) as browser:
            browser.get("/console/login/")
            signed_in = browser.post(
                "/console/login/",
                data={
                    "username": username,
                    "password": password,
                    "csrfmiddlewaretoken": browser.cookies["csrftoken"],
                },
            )
            assert signed_in.status_code == 302, signed_in.text
            page = browser.get(f"/console/t/demo/tasks/{task_id}/")
        assert page.status_code == 200
        assert UNDECRYPTABLE_ERROR in page.text
    finally:
        rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "lost-key"}, agent="push-ask")


def test_the_data_migration_encrypts_plain_rows_once(rpc, stored):
    task = Task.objects.get(
        pk=rpc("SendMessage", user_message("hi", f"mig-{uuid.uuid4()}"))["result"]["task"]["id"]
    )
    token, credentials = secrets()
    config = PushConfig.objects.create(
        tenant_id=task.tenant_id, task=task, config_id="legacy", url="http://127.0.0.1:9/legacy"
    )
    try:
        # A row as 0002 stored it: plain text in the columns.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE tasks_app_pushconfig SET token = %s, auth_credentials = %s WHERE id = %s",
                [token, credentials, config.pk],
            )
        schema_editor = SimpleNamespace(connection=connection)
        migration_0003.encrypt_secrets(apps, schema_editor)
        encrypted = raw_columns(config.pk)
        assert all(value.startswith(PREFIX) for value in encrypted)
        assert token not in encrypted[0] and credentials not in encrypted[1]
        reread = PushConfig.objects.get(pk=config.pk)
        assert (reread.token, reread.auth_credentials) == (token, credentials)
        # Run again, it leaves ciphertext alone.
        migration_0003.encrypt_secrets(apps, schema_editor)
        assert raw_columns(config.pk) == encrypted
    finally:
        config.delete()


def test_the_migrations_match_the_models(stored):
    # Exits with status 1 (failing the test) when a model change has no migration.
    call_command("makemigrations", check=True, dry_run=True, verbosity=0)
