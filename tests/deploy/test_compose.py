"""docker-compose.yml: valid against the Compose specification; its production settings pass check --deploy.

compose-spec.json is the Compose specification's JSON schema (compose-spec/compose-spec,
schema/compose-spec.json at commit 00655e2222608fa6eaecdf12ac5195889ca2244a), kept here
because the docker CLI on the test machines has no compose plugin to run `docker compose config`.
"""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.live import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SCHEMA = Path(__file__).with_name("compose-spec.json")
LONG_RUNNING = ("web", "worker", "control", "beat")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_compose_file_follows_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
    assert errors == [], "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    # The schema is strict: a misspelt key is refused, so the check above can fail.
    broken = {
        **compose,
        "services": {**compose["services"], "web": {**compose["services"]["web"], "helthcheck": {}}},
    }
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def test_services_restart_and_report_their_health(compose):
    services = compose["services"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["command"][-2:] == ["migrate", "--noinput"]
    for name in LONG_RUNNING + ("postgres", "redis"):
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["healthcheck"]["test"], name
    for name in LONG_RUNNING:
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    # Scalable: no fixed container name or host port per worker.
    assert "container_name" not in services["worker"] and "ports" not in services["worker"]
    # Every process that records metrics shares one multiprocess directory.
    for name in ("web", "worker", "control"):
        environment = services[name]["environment"]
        assert environment["PROMETHEUS_MULTIPROC_DIR"] == "/var/lib/a2a-metrics"
        assert "metrics:/var/lib/a2a-metrics" in services[name]["volumes"]


def test_the_workers_take_one_lane_each(compose):
    # settings.WORKER_LANE: which of the two queues a worker takes (a2a_platform/celery.py).
    services = compose["services"]
    assert services["worker"]["environment"]["WORKER_LANE"] == "turns"
    assert services["control"]["environment"]["WORKER_LANE"] == "control"
    for name in ("worker", "control"):
        # The rest of the environment is every app service's (the YAML merge).
        assert services[name]["environment"]["DATABASE_URL"] == services["web"]["environment"]["DATABASE_URL"]
        assert "--queues" not in services[name]["command"] and "-Q" not in services[name]["command"]


def test_check_deploy_passes_with_the_web_services_environment(compose, tmp_path):
    environment = dict(compose["services"]["web"]["environment"])
    # Docker secrets are files under /run/secrets: made here with fresh values.
    for name in compose["services"]["web"]["secrets"]:
        path = tmp_path / name
        if name == "field_encryption_keys":
            from cryptography.fernet import Fernet

            path.write_text(Fernet.generate_key().decode())
        else:
            path.write_text(secrets.token_urlsafe(50))
        for key, value in environment.items():
            if value == f"/run/secrets/{name}":
                environment[key] = str(path)
    environment["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update({key: str(value) for key, value in environment.items()})
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    # The same check fails on the development defaults: it is not a check that passes anything.
    dev = {key: value for key, value in env.items() if key not in environment}
    failing = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=dev,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failing.returncode != 0 and "security.W018" in failing.stderr + failing.stdout
