"""What DATABASE_URL gives: a SQLite URL gets the embedded default's backend and options."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READ = (
    "import json, django; django.setup(); from django.conf import settings; "
    "print(json.dumps(settings.DATABASES['default'], default=str))"
)


def _database(url: str | None, tmp_path) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "a2a_platform.settings", "A2A_VAR_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    if url is not None:
        env["DATABASE_URL"] = url
    done = subprocess.run(
        [sys.executable, "-c", READ], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("url", ["sqlite:///{path}", None])
def test_a_sqlite_database_gets_the_writers_lock_and_the_default_options(url, tmp_path):
    path = tmp_path / "named.sqlite3"
    database = _database(url.format(path=path) if url else None, tmp_path)
    assert database["ENGINE"] == "a2a_platform.backends.sqlite3"
    assert database["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in database["OPTIONS"]["init_command"]
    if url:
        assert database["NAME"] == str(path)


def test_a_postgresql_url_keeps_its_pool(tmp_path):
    database = _database("postgres://postgres@127.0.0.1:5432/any", tmp_path)
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert database["OPTIONS"]["pool"]["max_size"] >= 1
