"""Web and worker processes leave what start-up loaded out of the collector (a2a_platform/collector.py)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, tmp_path) -> list[int]:
    """The integers a fresh interpreter prints, set up as the platform's processes are."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "a2a_platform.settings", "A2A_VAR_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [int(value) for value in done.stdout.split()]


def test_the_web_application_freezes_its_startup_objects(tmp_path):
    [before, after] = _run(
        "import gc; print(gc.get_freeze_count()); import a2a_platform.asgi; print(gc.get_freeze_count())",
        tmp_path,
    )
    assert before == 0
    # Django, Channels, the a2a-sdk and protobuf's modules: well over a hundred thousand objects.
    assert after > 100_000


def test_a_worker_freezes_its_startup_objects_once_ready(tmp_path):
    loaded, ready = _run(
        "import gc, django; django.setup(); from celery import signals; import a2a_platform.celery; "
        "print(gc.get_freeze_count()); signals.worker_ready.send(sender=None); print(gc.get_freeze_count())",
        tmp_path,
    )
    assert loaded == 0  # loading the Celery app alone (as beat and the web do) freezes nothing
    assert ready > 100_000


def test_a_prefork_child_freezes_its_startup_objects_as_it_starts(tmp_path):
    loaded, started = _run(
        "import gc, django; django.setup(); from celery import signals; import a2a_platform.celery; "
        "print(gc.get_freeze_count()); signals.worker_process_init.send(sender=None); "
        "print(gc.get_freeze_count())",
        tmp_path,
    )
    assert loaded == 0
    assert started > 100_000
