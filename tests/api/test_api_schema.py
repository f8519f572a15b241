"""The OpenAPI schema is valid, the docs page works without a CDN, and a bounded fuzz run finds no 500."""

import re
import subprocess
import sys

import httpx
from openapi_spec_validator import validate

from tests.api import tenancy
from tests.live import ROOT

trio = tenancy.trio


def test_the_schema_is_valid_openapi_and_covers_every_endpoint(trio):
    schema = httpx.get(f"{trio.base_url}/api/schema/?format=json", timeout=30).json()
    validate(schema)
    paths = set(schema["paths"])
    assert "/api/v1/tenants/{tenant}/tasks/{task_id}/answer/" in paths
    assert "/api/v1/tenants/{tenant}/clients/{client_id}/revoke/" in paths
    assert "/api/v1/tenants/{tenant}/agents/import/" in paths
    assert len(paths) == 21
    assert "oauth2" in schema["components"]["securitySchemes"]


def test_the_docs_page_loads_its_assets_from_the_platform(trio):
    page = httpx.get(f"{trio.base_url}/api/docs/", timeout=30)
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(url.startswith("/api/docs/assets/") for url in assets)
    for url in assets:
        assert httpx.get(f"{trio.base_url}{url}", timeout=30).status_code == 200


def test_a_schema_driven_fuzz_run_finds_no_server_error(trio, tmp_path):
    from tenants.models import Membership, Tenant

    # A tenant of its own, so fuzzed deletes and revokes touch nothing the other tests use.
    fuzz, _ = Tenant.objects.get_or_create(slug="fuzz", defaults={"name": "Fuzz"})
    Membership.objects.update_or_create(user=trio.users["alice"], tenant=fuzz, defaults={"role": "owner"})
    token = _fuzz_token(trio, fuzz)
    config = tmp_path / "schemathesis.toml"
    config.write_text('[parameters]\n"path.tenant" = "fuzz"\n')
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run"]
    command += [f"{trio.base_url}/api/schema/?format=json", "--url", trio.base_url]
    command += ["-H", f"Authorization: Bearer {token}", "--checks", "not_a_server_error"]
    # Bounded: a few examples per operation, no time-filling fuzz loop, one worker, a fixed seed.
    command += ["--max-examples", "4", "--phases", "coverage,fuzzing", "--workers", "1", "--seed", "1"]
    command += ["--request-timeout", "20", "--suppress-health-check", "all"]
    # Revoking finds the run's own client in the list and ends the run's access: tested on its own.
    command += ["--exclude-path-regex", ".*/revoke/$"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "schemathesis.txt").write_text(output)
    assert done.returncode == 0, output[-6000:]
    found = re.search(r"(\d+) generated, (\d+) passed", output)
    assert found and found.group(1) == found.group(2) and int(found.group(1)) > 100, output[-3000:]
    # The run was authenticated throughout: nothing it did took the token's access away.
    still = httpx.get(f"{trio.base_url}/api/v1/tenants/fuzz/", headers=trio.auth(token), timeout=30)
    from tenants.models import AuditEvent

    happened = list(AuditEvent.objects.filter(tenant=fuzz).values_list("action", "target_id"))
    assert still.status_code == 200, (still.text, happened)


def _fuzz_token(trio, tenant) -> str:
    import secrets
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, set_token_value

    from tenants.services import oauth_client_create

    # alice's token from an interactive client of the fuzz tenant: a person, so every endpoint is open.
    app, _ = oauth_client_create(
        tenant=tenant,
        actor="system:test",
        grant="authorization-code",
        redirect_uris="http://127.0.0.1/cb",
        scopes=tenancy.ALL_SCOPES,
    )
    raw = secrets.token_urlsafe(24)
    token = AccessToken(
        application=app,
        user=trio.users["alice"],
        scope=" ".join(tenancy.ALL_SCOPES),
        expires=timezone.now() + timedelta(hours=1),
    )
    set_token_value(token, raw)
    token.save()
    return raw
