import faulthandler
import logging
import signal
import threading
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connection

from a2a_platform.seed import DEMO_AGENTS, ROTATE_DEMO_SECRET, admin_lines, manage_py, seed_demo

logger = logging.getLogger(__name__)


def start_embedded_worker() -> None:
    """Embedded default: jobs run on threads of this process (tasks_app/dispatch.py); start the sweeper."""
    threading.Thread(target=_sweep_forever, name="embedded-sweeper", daemon=True).start()


def _sweep_forever() -> None:
    from django.db import close_old_connections

    from tasks_app.push import push_sweep
    from tasks_app.retention import retention_sweep
    from tasks_app.sweeper import turn_sweep

    stop = threading.Event()
    push_every = settings.A2A_PUSH_SWEEP_INTERVAL
    since_push = push_every
    # The first retention run comes one interval after the start, as beat's does.
    since_retention = 0.0
    while not stop.wait(settings.A2A_SWEEP_INTERVAL):
        since_push += settings.A2A_SWEEP_INTERVAL
        since_retention += settings.A2A_SWEEP_INTERVAL
        try:
            turn_sweep()
            if since_push >= push_every:
                since_push = 0.0
                push_sweep()
            if since_retention >= settings.A2A_RETENTION_INTERVAL:
                since_retention = 0.0
                retention_sweep()
        except Exception:
            logger.exception("Sweep failed")
        finally:
            close_old_connections()


def database_description() -> str:
    """Which database this process uses (never its user or password), for the banner."""
    database = settings.DATABASES["default"]
    engine = database["ENGINE"].rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"SQLite {database['NAME']}"
    vendor = {"postgresql": "PostgreSQL", "mysql": "MySQL", "oracle": "Oracle"}.get(engine, engine)
    where = database.get("HOST") or "localhost"
    if database.get("PORT"):
        where += f":{database['PORT']}"
    return f"{vendor} database {database['NAME']} on {where}"


def worker_description() -> str:
    """Where agent turns run and how events travel, for the banner."""
    if settings.EMBEDDED_WORKER:
        return (
            f"{settings.EMBEDDED_WORKER_THREADS} worker threads in this process for turns and "
            f"{settings.EMBEDDED_CONTROL_THREADS} for webhooks and cancels; in-process job queue "
            "and channel layer (no REDIS_URL)"
        )
    redis = urlsplit(settings.REDIS_URL)
    where = f"{redis.hostname}:{redis.port or 6379}" if redis.hostname else redis.path
    return f"separate Celery workers; broker and channel layer on Redis at {where}"


class Command(BaseCommand):
    help = "Migrate, seed the demo tenant and serve the platform on Daphne."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-seed", action="store_true", help="Do not create the demo tenant")
        parser.add_argument(
            "--grpc-port",
            type=int,
            default=settings.A2A_GRPC_PORT,
            help="Port of the gRPC binding on the embedded default (0: any free port)",
        )
        parser.add_argument("--no-grpc", action="store_true", help="Do not serve the gRPC binding")

    def handle(self, *args, host, port, no_seed, grpc_port, no_grpc, **options):
        # `kill -USR1 <pid>` prints every thread's stack: a stuck turn shows where it waits.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        call_command("migrate", interactive=False, verbosity=0)
        # The demo proxy fronts this server's own echo agent, over loopback.
        loopback = "127.0.0.1" if host in ("0.0.0.0", "::", "", "localhost") else host
        seeded = seed_demo(local_base_url=f"http://{loopback}:{port}") if not no_seed else None
        admin_password = seeded.admin_password if seeded else None
        if settings.EMBEDDED_WORKER:
            start_embedded_worker()
        grpc_url = None
        if settings.EMBEDDED_WORKER and not no_grpc:
            grpc_url = self._start_grpc(host, port, grpc_port)
        self._print_banner(host, port, admin_password, seeded=not no_seed, grpc_url=grpc_url)
        if seeded:
            self._print_credentials(host, port, seeded)

        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from a2a_platform.asgi import application

        Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            application_close_timeout=30,
            verbosity=0,
        ).run()

    def _start_grpc(self, host: str, port: int, grpc_port: int) -> str:
        """The gRPC binding on a second port (services mode runs `manage.py grpcserve` instead)."""
        from a2a_platform.management.commands.grpcserve import start_grpc_thread

        shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        base = settings.PUBLIC_BASE_URL or f"http://{shown_host}:{port}"
        bound = start_grpc_thread(host, grpc_port, base)
        if not settings.A2A_GRPC_PUBLIC_URL:
            # The cards this process serves name the port it really listens on.
            settings.A2A_GRPC_PUBLIC_URL = f"{shown_host}:{bound}"
        return settings.A2A_GRPC_PUBLIC_URL

    def _print_banner(
        self, host: str, port: int, admin_password: str | None, seeded: bool, grpc_url: str | None = None
    ) -> None:
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        base = settings.PUBLIC_BASE_URL or f"http://{shown_host}:{port}"
        embedded = settings.EMBEDDED_WORKER and connection.vendor == "sqlite"
        out = self.stdout
        out.write(f"A2A platform serving on {base}" + (" (embedded default)" if embedded else ""))
        out.write(f"  Database:    {database_description()}")
        out.write(f"  Workers:     {worker_description()}")
        out.write(f"  Health:      {base}/healthz  {base}/readyz")
        out.write(f"  Console:     {base}/console/  (operators: queues, tasks, agents)")
        if grpc_url:
            out.write(f"  gRPC:        {grpc_url}  (lf.a2a.v1.A2AService; tenant field '<tenant>/<agent>')")
        out.write(f"  Admin:       {base}/admin/")
        if seeded:
            for line in admin_lines(admin_password):
                out.write(f"               {line}")
        if seeded:
            # Pad to the longest slug so the URLs line up.
            width = max(len(slug) for slug, *_rest in DEMO_AGENTS) + 1
            for slug, _name, _handler, _visibility in DEMO_AGENTS:
                url = f"{base}/a2a/demo/{slug}/"
                out.write(f"  Agent {slug + ':':{width}} {url}  (card: .well-known/agent-card.json)")
            body = (
                '{"jsonrpc":"2.0","id":"req-1","method":"SendMessage","params":{"message":'
                '{"role":"ROLE_USER","messageId":"msg-1","parts":[{"text":"hi"}]}}}'
            )
            out.write("  Try it:")
            out.write(
                f"  curl -s -X POST {base}/a2a/demo/echo/ -H 'Content-Type: application/json' "
                f"-H 'A2A-Version: 1.0' -d '{body}'"
            )
        self.stdout.flush()

    def _print_credentials(self, host: str, port: int, seeded) -> None:
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        base = settings.PUBLIC_BASE_URL or f"http://{shown_host}:{port}"
        out = self.stdout
        out.write(f"  OAuth2 demo client (tenant demo): client_id {seeded.demo_client_id}")
        if seeded.demo_client_secret:
            # Stored hashed: this is the only time the secret can be shown.
            out.write(f"               client_secret {seeded.demo_client_secret}  (shown once)")
        else:
            out.write("               client_secret shown on the first start only (stored hashed)")
        out.write(f"               a new secret: {manage_py()} {ROTATE_DEMO_SECRET}")
        out.write(
            f"  Token for secure-echo: curl -s -u '<client_id>:<client_secret>' "
            f"-d grant_type=client_credentials {base}/o/token/"
        )
        out.write(f"  Management API: {base}/api/v1/tenants/  (docs: {base}/api/docs/)")
        self.stdout.flush()
