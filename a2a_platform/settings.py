"""Settings for the A2A platform, driven entirely by environment variables.

Dev, test and production differ only by environment. With nothing set the
platform runs on its embedded default: SQLite under var/, an in-process channel
layer and Celery worker threads inside the server process.
"""

import ipaddress
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

BASE_DIR = Path(__file__).resolve().parent.parent


# --- Typed environment readers ------------------------------------------------
def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def env_secret(name: str, default: str = "") -> str:
    """A secret from NAME, or from the file named by NAME_FILE (Docker secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


# --- Core ---------------------------------------------------------------------
DEBUG = env_bool("DEBUG", default=True)
VAR_DIR = Path(env_str("A2A_VAR_DIR", str(BASE_DIR / "var")))
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off")
    SECRET_KEY = "insecure-dev-key-only-for-the-embedded-default"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "*" if DEBUG else "")
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required when DEBUG is off")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
# Used for the URLs inside agent cards; unset means "take it from the request".
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL").rstrip("/")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tenants",
    "oauth2_provider",
    "agents",
    "tasks_app",
    "a2a_platform.console",
    # The project package itself: its commands (serve, seed_demo) use every app below it.
    "a2a_platform",
]

MIDDLEWARE = [
    # First: every log line after it carries the request id.
    "a2a_platform.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A query of too many fields is a 400 here, with the security headers (a2a_platform/middleware.py).
    "a2a_platform.middleware.QueryFieldsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # Django's, without the slash redirect of a POST (a2a_platform/middleware.py).
    "a2a_platform.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "a2a_platform.urls"
ASGI_APPLICATION = "a2a_platform.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------


def sqlite_database(name: str) -> dict:
    """The embedded default's SQLite database at `name`: also what a sqlite:// DATABASE_URL gets."""
    return {
        "ENGINE": "a2a_platform.backends.sqlite3",
        "NAME": name,
        # IMMEDIATE transactions and WAL let the server and the worker threads
        # write without "database is locked" upgrades; the timeout covers bursts.
        # The backend is Django's, with this process's writers queued on a lock
        # instead of SQLite's sleeping busy handler (a2a_platform/backends/sqlite3).
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # Connections stay open in the threads that do database work for async code.
        "CONN_MAX_AGE": None,
        # Tests run the server in another process, so the test database is a file.
        "TEST": {"NAME": str(VAR_DIR / "test.sqlite3")},
    }


DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        DATABASES["default"] = sqlite_database(DATABASES["default"]["NAME"])
    elif DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # Under ASGI every request runs in a thread of its own, so persistent
        # connections are never reused; a psycopg pool is (Django requires
        # CONN_MAX_AGE=0 with it).
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        # The pool checks a connection as it hands it out: after a database restart
        # the dead ones are dropped instead of failing one request each.
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
        # Django turns psycopg's prepared statements off (for connection poolers in
        # transaction mode). The hand-written hot statements bind their values on the
        # server (tenants/sql.py); from a connection's DB_PREPARE_THRESHOLD-th run of
        # one, PostgreSQL no longer parses and plans it. "off": never prepare.
        _prepare = env_str("DB_PREPARE_THRESHOLD", "5").strip().lower()
        DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = (
            None if _prepare == "off" else int(_prepare)
        )
        # A connection whose server vanished without a word (its host died, a failover, a
        # dropped route) fails within seconds instead of holding its thread for the kernel's
        # ~15 minutes: a statement sent into the void by DB_TCP_USER_TIMEOUT, a wait for an
        # answer by keepalive probes (DB_KEEPALIVES_IDLE, then DB_KEEPALIVES_COUNT unanswered
        # probes DB_KEEPALIVES_INTERVAL apart; Linux ends the wait at the user timeout if that
        # comes first). 0: the kernel's defaults. Values given in DATABASE_URL's query win.
        _options = DATABASES["default"]["OPTIONS"]
        _user_timeout = env_float("DB_TCP_USER_TIMEOUT", 30.0)
        _keepalives_idle = env_int("DB_KEEPALIVES_IDLE", 30)
        if _user_timeout > 0:
            _options.setdefault("tcp_user_timeout", int(_user_timeout * 1000))
        if _keepalives_idle > 0:
            _options.setdefault("keepalives", 1)
            _options.setdefault("keepalives_idle", _keepalives_idle)
            _options.setdefault("keepalives_interval", env_int("DB_KEEPALIVES_INTERVAL", 10))
            _options.setdefault("keepalives_count", env_int("DB_KEEPALIVES_COUNT", 3))
        # The server's side of such a loss: a COMMIT that never arrived leaves its session idle in
        # its transaction, holding its row locks (a task's, so its turn and every cancel wait), until
        # the server's own keepalives end it (two hours by default). The server ends a session idle
        # in a transaction that long instead; none of the platform's transactions waits between
        # statements. 0: the server's setting. It goes in libpq's `options`, after PGOPTIONS (which
        # libpq reads only without them) and any given in DATABASE_URL; one named there wins.
        # PgBouncer refuses a `-c` it does not track (or, told to ignore `options`, drops it): behind
        # one set 0 and put it on the role (ALTER ROLE ... SET idle_in_transaction_session_timeout).
        _idle_in_transaction = env_float("DB_IDLE_IN_TRANSACTION_TIMEOUT", 60.0)
        _given = " ".join(filter(None, [os.environ.get("PGOPTIONS", ""), _options.get("options", "")]))
        if _idle_in_transaction > 0 and "idle_in_transaction" not in _given:
            # In milliseconds, which PostgreSQL takes up to 2^31 - 1 (24.8 days).
            _milliseconds = min(int(_idle_in_transaction * 1000), 2**31 - 1)
            _options["options"] = f"{_given} -c idle_in_transaction_session_timeout={_milliseconds}".strip()
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": env_int("DB_POOL_MIN", 2),
            "max_size": env_int("DB_POOL_MAX", 40),
            "timeout": env_float("DB_POOL_TIMEOUT", 10.0),
        }
    else:
        DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60)
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": sqlite_database(env_str("SQLITE_PATH", str(VAR_DIR / "db.sqlite3")))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: channel layer and Celery broker -------------------------------------
REDIS_URL = env_str("REDIS_URL")
# Embedded mode: no Redis, so the worker runs as threads inside the server process.
EMBEDDED_WORKER = not REDIS_URL
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub, not channels_redis' list-and-sorted-set layer: a
            # publish is one PUBLISH and a wait reads from a queue in the process,
            # where the core layer runs several commands per group_send and per
            # receive. Nothing is lost by a layer that keeps no messages: a
            # reader joins the task's group before it reads the task's log, and
            # the log is what it trusts (tasks_app/events.py).
            "BACKEND": "a2a_platform.channel_layers.RedisPubSubLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, which broke
                # idle connections ("Timeout reading from ..."): well over any wait.
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    if REDIS_URL.startswith("redis://"):
        # kombu's Redis transport, keeping its publishing client (a2a_platform/celery.py);
        # other schemes (rediss://, sentinel) keep the transport their URL names.
        CELERY_BROKER_TRANSPORT = "a2a_platform.celery:RedisTransport"
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "a2a_platform.channel_layers.InProcessChannelLayer"}}
    CELERY_BROKER_URL = "memory://localhost/"
    # The in-memory transport polls; keep the poll short so turns start at once.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.02}
# One queue name per deployment, so two platforms can share a Redis without eating each other's turns.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "a2a-turns")
# The control lane: the jobs that keep the platform going rather than run an agent (beat's sweeps,
# webhook deliveries and their retries, an agent's cancel()) have a queue of their own, beside the
# turns'. `workserve` runs one more worker on it (WORKER_CONTROL_THREADS) and its turn workers on
# the turn queue alone, so that a webhook, a sweep or a cancel never waits for a turn thread when
# every thread runs a long turn (tasks_app/dispatch.py). WORKER_LANE picks a worker's queues
# (a2a_platform/celery.py): "turns", "control", or unset for both (a lone worker, as in the tests).
A2A_CONTROL_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-control"
# Each lane's queue, by the lane's name (WORKER_LANE, the queue depth metric's samples).
A2A_LANE_QUEUES = {"turns": CELERY_TASK_DEFAULT_QUEUE, "control": A2A_CONTROL_QUEUE}
CELERY_TASK_QUEUES = [Queue(name, Exchange(name), routing_key=name) for name in A2A_LANE_QUEUES.values()]
CELERY_TASK_ROUTES = {
    f"tasks_app.tasks.{job}": {"queue": A2A_CONTROL_QUEUE}
    for job in ("deliver_push", "cancel_agent", "sweep_turns", "sweep_push", "sweep_retention")
}
WORKER_LANE = env_str("WORKER_LANE", "").strip().lower()
if WORKER_LANE and WORKER_LANE not in A2A_LANE_QUEUES:
    raise ImproperlyConfigured(f'WORKER_LANE must be "turns", "control" or unset, not {WORKER_LANE!r}')
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# A worker thread keeps its database connection from job to job (an agent turn's
# database calls run on its thread: tasks_app/engine.py). Celery's Django fixup
# closes every connection before and after every job unless this is set, and then
# only every 2 x N jobs: each turn would check one out of the pool again.
# a2a_platform/celery.py checks one that sat idle and closes one a job left broken.
# Each worker thread holds one connection of its process's pool for good: keep
# DB_POOL_MAX above the worker's threads plus A2A_DB_THREADS (and one for the lease
# keeper, tasks_app/turns/keeper.py).
CELERY_DB_REUSE_MAX = 1_000_000_000
# Workers outlive broker outages: reconnect forever, at start and later. A turn
# that runs keeps running through an outage (it writes to the database, not to
# the broker), so a lost connection does not cancel it.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_HEARTBEAT = 0
if REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Every job's work is recovered from the database, not from the broker:
        # a turn by its lease or, never claimed, by its dispatch time
        # (tasks_app/sweeper.py), a webhook delivery by its row (push_sweep). So
        # the broker keeps no copy of a job a worker took (kombu's ack emulation:
        # a JSON copy and two pipelines to Redis per job, about a seventh of the
        # worker's CPU per echo turn); prefetch limits still hold, in memory.
        "ack_emulation": False,
        # Only used with ack emulation; kept for a deployment that turns it back on.
        "visibility_timeout": 3600,
        "socket_timeout": 30,
        "socket_connect_timeout": 5,
        "retry_on_timeout": True,
        "health_check_interval": 10,
    }
# Threads that run agent turns inside `manage.py serve` on the embedded default (at least one).
EMBEDDED_WORKER_THREADS = max(1, env_int("EMBEDDED_WORKER_THREADS", 8))
# Its control lane: threads of their own (at least one) for webhook deliveries and an agent's
# cancel() (its sweeper is a thread already), so that they never wait behind the turns.
EMBEDDED_CONTROL_THREADS = max(1, env_int("EMBEDDED_CONTROL_THREADS", 2))
# The sweeper (beat in services mode, a thread of `manage.py serve` embedded).
A2A_SWEEP_INTERVAL = env_float("A2A_SWEEP_INTERVAL", 2.0)
# Beat's sweeps have no expiry (Celery would judge it on the worker's clock): workers back
# from an outage find one queued per interval they missed, and all but the first return at
# once (tasks_app/sweeper.py beat_sweep, on Redis' clock).
CELERY_BEAT_SCHEDULE = {
    "sweep-turns": {"task": "tasks_app.tasks.sweep_turns", "schedule": A2A_SWEEP_INTERVAL},
}

# --- Task engine ----------------------------------------------------------------
# How long a blocking SendMessage waits for a terminal or interrupted state.
A2A_BLOCKING_TIMEOUT = env_float("A2A_BLOCKING_TIMEOUT", 60.0)
# Seconds an Idempotency-Key is remembered (the IETF httpapi draft suggests 24 h).
A2A_IDEMPOTENCY_TTL = env_float("A2A_IDEMPOTENCY_TTL", 24 * 3600.0)
# Comment lines sent on idle SSE streams so proxies keep them open.
A2A_SSE_HEARTBEAT = env_float("A2A_SSE_HEARTBEAT", 15.0)
# An open stream (SSE, gRPC) checks its caller's credentials again at most this often
# (a revoked token, a signed-out session, a person who left the tenant end it).
A2A_STREAM_RECHECK = env_float("A2A_STREAM_RECHECK", 10.0)
# A running turn holds a lease it renews every A2A_TURN_HEARTBEAT seconds (and
# always before four fifths of it have gone); a lease not renewed for
# A2A_TURN_LEASE seconds means its worker is gone, and the sweeper runs the turn
# again, up to A2A_TURN_MAX_ATTEMPTS times in all. A worker that could not renew
# it stops its agent a fifth of the lease before it lapses (tasks_app.turns.run.Fence).
A2A_TURN_LEASE = env_float("A2A_TURN_LEASE", 10.0)
A2A_TURN_HEARTBEAT = env_float("A2A_TURN_HEARTBEAT", 2.0)
A2A_TURN_MAX_ATTEMPTS = env_int("A2A_TURN_MAX_ATTEMPTS", 3)
# A turn still queued after this many seconds is dispatched again by the sweeper; each
# further copy of it waits twice as long as the one before, up to A2A_TURN_REDISPATCH_MAX
# (a backlog's turns are not lost, only waiting: tasks_app/sweeper.py).
A2A_TURN_REDISPATCH_AFTER = env_float("A2A_TURN_REDISPATCH_AFTER", 5.0)
A2A_TURN_REDISPATCH_MAX = env_float("A2A_TURN_REDISPATCH_MAX", 60.0)  # below the first wait: no backoff
# Events an agent emits in a burst are stored in one transaction: a batch is
# written this many seconds after its first event, or at once when an event
# ends or interrupts the task.
A2A_EVENT_FLUSH_DELAY = env_float("A2A_EVENT_FLUSH_DELAY", 0.01)
# ListTasks keeps a total above its exact cap for a few seconds per set of filters
# (tasks_app/selectors.py): in the process's memory, whatever the default cache is,
# so a list never waits on, or fails with, a cache server.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "list-totals": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "list-totals"},
}
# Threads that run database work for async code (the engine, the bindings).
A2A_DB_THREADS = env_int("A2A_DB_THREADS", 16)
# Daphne processes `manage.py webserve` runs on one port (services mode); 0: one per CPU.
WEB_PROCESSES = env_int("WEB_PROCESSES", 0)
# Celery worker processes `manage.py workserve` runs (services mode); 0: one per CPU.
WORKER_PROCESSES = env_int("WORKER_PROCESSES", 0)
# Turn threads of all of workserve's processes together, shared out among them.
WORKER_THREADS = env_int("WORKER_THREADS", 8)
# Threads of the one more worker process workserve runs on the control queue alone; 0: none.
WORKER_CONTROL_THREADS = env_int("WORKER_CONTROL_THREADS", 2)
A2A_CARD_MAX_AGE = env_int("A2A_CARD_MAX_AGE", 300)
A2A_MAX_REQUEST_BYTES = env_int("A2A_MAX_REQUEST_BYTES", 10 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = A2A_MAX_REQUEST_BYTES
# Dotted paths of extra AgentExecutor classes, as "name=package.module.Class".
A2A_EXTRA_HANDLERS = env_list("A2A_EXTRA_HANDLERS")

# --- gRPC binding ----------------------------------------------------------------
# The port gRPC listens on: `manage.py grpcserve` (services mode), and the second
# port of `manage.py serve` on the embedded default.
A2A_GRPC_PORT = env_int("A2A_GRPC_PORT", 50051)
# host:port where callers reach gRPC, listed in the agent cards. Unset: the cards
# list no gRPC interface, except under `manage.py serve`, which names its own port.
A2A_GRPC_PUBLIC_URL = env_str("A2A_GRPC_PUBLIC_URL")

# --- Push notifications ----------------------------------------------------------
# Webhooks to loopback/private/link-local addresses are refused unless this is on (dev, tests).
PUSH_ALLOW_PRIVATE_NETWORKS = env_bool("PUSH_ALLOW_PRIVATE_NETWORKS", default=False)
# The a2a_proxy handler applies the same screening to its remote URL.
PROXY_ALLOW_PRIVATE_NETWORKS = env_bool("PROXY_ALLOW_PRIVATE_NETWORKS", default=False)
# The most an a2a_proxy agent's remote agent may send in one answer, or in one line of an event
# stream (the SDK holds either in memory whole): past it the turn fails, the worker stays up.
PROXY_MAX_RESPONSE_BYTES = env_int("PROXY_MAX_RESPONSE_BYTES", 32 * 1024 * 1024)
# Attempts per (config, event), counting the first; then the event is given up and the next one goes.
PUSH_MAX_ATTEMPTS = env_int("PUSH_MAX_ATTEMPTS", 6)
# Retry n waits min(BASE * 2**(n-1), MAX) seconds.
PUSH_RETRY_BASE_DELAY = env_float("PUSH_RETRY_BASE_DELAY", 1.0)
PUSH_RETRY_MAX_DELAY = env_float("PUSH_RETRY_MAX_DELAY", 60.0)
# Seconds a webhook has for its whole answer (connection, request, status line), well under the lease.
PUSH_TIMEOUT = env_float("PUSH_TIMEOUT", 10.0)
PUSH_MAX_CONFIGS_PER_TASK = env_int("PUSH_MAX_CONFIGS_PER_TASK", 10)
# An attempt still "sending" after this many seconds was lost with its worker and is sent again.
PUSH_SENDING_LEASE = env_int("PUSH_SENDING_LEASE", 120)
# A delivery job starts no new attempt after this many seconds (it makes at least one): it
# queues a job for the rest and frees its thread, so the jobs queued meanwhile, a sweep first,
# go in between (tasks_app/push.py).
PUSH_JOB_BUDGET = env_float("PUSH_JOB_BUDGET", 1.0)
# Seconds between push sweeps (beat in services mode, the sweeper thread embedded).
A2A_PUSH_SWEEP_INTERVAL = env_float("A2A_PUSH_SWEEP_INTERVAL", 30.0)
CELERY_BEAT_SCHEDULE["sweep-push"] = {
    "task": "tasks_app.tasks.sweep_push",
    "schedule": A2A_PUSH_SWEEP_INTERVAL,
}

# --- Retention -------------------------------------------------------------------
# Seconds between retention runs (tasks_app/retention.py): beat in services mode, a thread embedded.
A2A_RETENTION_INTERVAL = env_float("A2A_RETENTION_INTERVAL", 3600.0)
CELERY_BEAT_SCHEDULE["sweep-retention"] = {
    "task": "tasks_app.tasks.sweep_retention",
    "schedule": A2A_RETENTION_INTERVAL,
}
# Fernet keys that encrypt webhook secrets (push configs' token and credentials) at rest,
# comma-separated (or a file: FIELD_ENCRYPTION_KEYS_FILE). The first encrypts, all decrypt: to
# rotate, put a new key first and keep the old ones after it. Unset: one key derived from
# SECRET_KEY, so a new SECRET_KEY makes the stored secrets unreadable; production should set its own
# (python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())').
FIELD_ENCRYPTION_KEYS = [key.strip() for key in env_secret("FIELD_ENCRYPTION_KEYS").split(",") if key.strip()]

# Bearer token for /metrics; unset means loopback only.
METRICS_TOKEN = env_secret("METRICS_TOKEN")

# --- Proxies in front ------------------------------------------------------------
# Proxies between the callers and Daphne, each appending to X-Forwarded-For; 0: the header is
# ignored (`webserve --proxy-headers` makes it 1). The caller's address is the entry this many
# from the right (a2a_platform/forwarded.py), read only from connections of TRUSTED_PROXIES
# (addresses or networks, comma-separated).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
# The same for the gRPC binding's `x-forwarded-for` metadata, from the same TRUSTED_PROXIES. A
# count of its own: gRPC is often reached directly where HTTP has a proxy in front.
GRPC_TRUSTED_PROXY_COUNT = env_int("GRPC_TRUSTED_PROXY_COUNT", 0)
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES", "127.0.0.0/8,::1")
try:
    for _proxy in TRUSTED_PROXIES:
        ipaddress.ip_network(_proxy, strict=False)
except ValueError as exc:
    raise ImproperlyConfigured(f"TRUSTED_PROXIES takes addresses or networks: {exc}") from None

# --- Auth -----------------------------------------------------------------------
OAUTH2_PROVIDER_APPLICATION_MODEL = "tenants.Application"
OAUTH2_PROVIDER = {
    "SCOPES": {
        "a2a:invoke": "Send messages, stream and cancel tasks",
        "a2a:read": "Read, list and subscribe to tasks",
        "a2a:push": "Manage push notification configs",
        # An approver: sees the tenant's tasks on an agent and decides auth-required ones it did not send.
        "a2a:approve": "Grant or deny auth-required tasks that other callers sent",
        # The management API, split by least privilege: agent config, task content, visibility.
        "agents:manage": "Manage the tenant's agents (configuration, not task content)",
        "agents:publish": "Change whether an agent is public or needs credentials",
        "tasks:read": "Read the tenant's tasks and messages through the management API",
        "tasks:act": "With tasks:read: answer and cancel the tenant's tasks as the person the token is for",
    },
    "DEFAULT_SCOPES": ["a2a:invoke", "a2a:read", "a2a:push"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_int("OAUTH_TOKEN_TTL", 3600),
    "PKCE_REQUIRED": True,
    # Clients get only their tenant's allowed scopes; interactive tokens only go to tenant members.
    "OAUTH2_VALIDATOR_CLASS": "tenants.oauth.TenantOAuth2Validator",
    # Store only checksums of tokens (RFC 9700): a database dump holds no usable bearer token.
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    # S256 only; "plain" PKCE protects nothing against an intercepted code.
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    # The rest of RFC 9700: no implicit or password grant (the platform offers client credentials
    # and authorization code only), bearer tokens in the Authorization header only, `iss` in
    # authorization responses, a replayed refresh token revokes its family.
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    # Plain-http redirect URIs (loopback callbacks) in development only.
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"] if DEBUG else ["https"],
}
LOGIN_URL = "/console/login/"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

# --- Console --------------------------------------------------------------------
LOGIN_REDIRECT_URL = "/console/"
LOGOUT_REDIRECT_URL = "/console/login/"
# Rows per page on the task lists and the audit log.
CONSOLE_PAGE_SIZE = env_int("CONSOLE_PAGE_SIZE", 50)

# --- Security in production -----------------------------------------------------
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
# HTTPS behind a TLS-terminating proxy: X-Forwarded-Proto, believed from TRUSTED_PROXIES only
# (a2a_platform/forwarded.py), not through SECURE_PROXY_SSL_HEADER, which believes any peer.
SECURE_CONTENT_TYPE_NOSNIFF = True
# Behind a TLS-terminating proxy (production): plain HTTP is redirected, browsers told to stay on
# HTTPS. The probes stay reachable over plain HTTP for health checks inside the network.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)

# --- I18n, static ---------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# --- DRF ------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Bearer first, so an unauthenticated call gets 401 with a Bearer challenge.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "oauth2_provider.contrib.rest_framework.OAuth2Authentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # DRF's JSON parser, with a bound on nesting (a deeper body was a 500).
    "DEFAULT_PARSER_CLASSES": [
        "a2a_platform.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "A2A Platform management API",
    "DESCRIPTION": "Tenant administration: agents, OAuth clients, tasks, members and the audit log.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Swagger UI from the drf-spectacular-sidecar package, served by the API itself: no CDN.
    "SWAGGER_UI_DIST": "/api/docs/assets/swagger-ui-dist",
    "SWAGGER_UI_FAVICON_HREF": "/api/docs/assets/swagger-ui-dist/favicon-32x32.png",
    "REDOC_DIST": "/api/docs/assets/redoc",
    # Describe DOT's bearer tokens as the OAuth2 flows the platform offers.
    "OAUTH2_FLOWS": ["clientCredentials", "authorizationCode"],
    "OAUTH2_TOKEN_URL": "/o/token/",
    "OAUTH2_AUTHORIZATION_URL": "/o/authorize/",
    "OAUTH2_REFRESH_URL": "/o/token/",
}

# --- Logging --------------------------------------------------------------------
# text (for people, the default) or json (one object a line, for log collectors); both
# carry the request id and the task id bound by the code (a2a_platform/logs.py).
LOG_FORMAT = env_str("LOG_FORMAT", "text").strip().lower()
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'text' or 'json', not {LOG_FORMAT!r}")
# One line per answered request (method, path, status, milliseconds); probes log at debug.
A2A_ACCESS_LOG = env_bool("A2A_ACCESS_LOG", default=True)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"default": {"()": "a2a_platform.logs.formatter", "log_format": LOG_FORMAT}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "default"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's own handlers print a second, unformatted copy (a non-JSON line): this one only.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.channels.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "kombu": {"level": "WARNING"},
        # Celery's "Task ... received" and "Task ... succeeded" lines per job repeat the
        # turn's own "ended" line (which carries the task id), at about 2.5% of the worker's
        # CPU per echo turn (py-spy, bench/README.md); failures are still logged, at ERROR.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
    },
}
