"""Settings of E31 Network, all driven by environment variables.

Standalone (no variables set): SQLite under ``var/``, in-memory channel
layer, Celery tasks run eagerly in-process. Production: ``DATABASE_URL``
(PostgreSQL) and ``REDIS_URL`` (Channels layer and Celery broker).
"""
from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import dj_database_url
from e31_protocol import PROTOCOL_VERSION, ErrorCode, ExitReason, FinishCode, HealthSource, PrestageState, ReportType

from apps.core.secretfile import read_or_create

from .env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
# Files at rest (issue 11): everything the site writes (var/, the SQLite file,
# media, the secret key, the demo password) is its user's alone: 0700
# directories, 0600 files. The umask covers files made later (uploads, bundles).
os.umask(0o077)
# `make lint` (E31_LINT=1, issue 22) only reads the code (makemigrations --check, the tests' syntax
# checks) and writes nothing: no var/, a placeholder key, an in-memory database. Any other process
# (`make run`, a worker, the tests) makes var/ and keeps its key there, as before.
E31_LINT = env_bool("E31_LINT", False)
VAR_DIR = Path(env_str("E31_VAR_DIR", str(BASE_DIR / "var")))
if not E31_LINT:
    VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    VAR_DIR.chmod(0o700)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one kept in ``var/`` across runs."""
    key = env_str("SECRET_KEY")
    if key:
        return key
    if E31_LINT:  # never serves; `check --deploy` flags the prefix
        return "django-insecure-lint-only-never-serves"
    return read_or_create(VAR_DIR / "secret_key", 50)  # 0600; safe when web and worker start at once


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from here: the product runs offline
    "django_filters",
    "channels",
    "apps.core",
    "apps.projects",
    "apps.jobs",
    "apps.pool",
    "apps.scheduling",
    "apps.metering",
    "apps.artifacts",
    "apps.notices",
    "apps.hooks",
    "apps.tokens",
    "apps.secrets",
    "apps.agent_api",
    "apps.live",
    "apps.web",
    "apps.ops",
    "e31site",  # wiring only; it hosts `manage.py standalone` (make run)
    "axes",  # sign-in throttling (issue 11): AXES_* below
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.metering.middleware.UserTimeZoneMiddleware",  # pages in the user's own time zone
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "e31site.security.ContentSecurityPolicyMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into its 429 page
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out sign-in before the password is checked
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "e31site.urls"
ASGI_APPLICATION = "e31site.asgi.application"
WSGI_APPLICATION = None

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
                "apps.web.context.budget_alert",
            ],
        },
    },
]

# Database: PostgreSQL through DATABASE_URL, else SQLite under var/ (standalone).
DATABASE_URL = env_str("DATABASE_URL")
if E31_LINT:  # lint needs no database server and leaves no file
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
elif DATABASE_URL:
    # Under ASGI every request's sync code runs in a fresh thread, so Django's
    # per-thread persistent connections would reconnect (a PostgreSQL backend
    # fork) on each request; psycopg's pool keeps connections across threads.
    # https://docs.djangoproject.com/en/5.2/ref/databases/#connection-pool
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
    if env_bool("E31_DB_POOL", True):
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": env_int("E31_DB_POOL_MIN", 2), "max_size": env_int("E31_DB_POOL_MAX", 20), "timeout": 30}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "e31.sqlite3",
            # WAL lets readers go on while the single writer commits; the
            # timeout makes a second writer wait instead of failing.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis feeds the channel layer and the Celery broker; without it the site
# runs as one process (standalone).
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    # https://github.com/django/channels_redis#configuration (docs/deploy.md "Live pages"):
    # capacity: messages one socket may fall behind before new ones are dropped;
    #   a drop is safe (versions, log gaps ask for a snapshot) but costs freshness,
    #   so it is far above a busy page's burst (a log chunk or two a second).
    # expiry: seconds an undelivered message lives; one older belongs to a gone socket.
    # group_expiry: seconds a socket stays in a group without re-joining; sockets
    #   re-join on every snapshot (connect, reconnect, tab shown again).
    # socket_timeout: redis-py 8 defaults to 5 s, the same as channels-redis's
    #   blocking BRPOP, so an idle receive raced its own read timeout and crashed
    #   the consumer (close 1011) or the agents' long poll (500); 30 s still
    #   notices a dead Redis.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                       "capacity": env_int("E31_CHANNEL_CAPACITY", 1000),
                       "expiry": 60, "group_expiry": env_int("E31_CHANNEL_GROUP_EXPIRY_S", 86400)},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# Live pages converge (docs/live.md): each socket's consumer sends a heartbeat with its groups'
# message numbers every E31_LIVE_HEARTBEAT_S, and joins its groups again every
# E31_LIVE_GROUP_RENEW_S (at most half the group expiry), so a page open for days still hears.
E31_LIVE_HEARTBEAT_S = env_float("E31_LIVE_HEARTBEAT_S", 15.0)
E31_LIVE_GROUP_RENEW_S = env_float("E31_LIVE_GROUP_RENEW_S", 3600.0)

# E-mail (the optional notice when a job is released): SMTP from EMAIL_HOST & co. in
# production, the console (stdout) in standalone or when no host is set.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST
                        else "django.core.mail.backends.console.EmailBackend")
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0)  # seconds; a mail server that never greets must not hold a worker
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "E31 Network <noreply@localhost>")
# The site's public URL, for links in e-mails: E31_SITE_URL, else the standalone address on E31_PORT
# (issue 26 item 7: a fixed 8031 sent every link elsewhere when E31_PORT was set).
E31_PORT = env_int("E31_PORT", 8031)
E31_SITE_URL = env_str("E31_SITE_URL", f"http://127.0.0.1:{E31_PORT}")
# The notice reconcile mails a release whose e-mail is missing once it is older than SETTLE (seconds:
# the on-release task's queue wait and EMAIL_TIMEOUT are far below it) and younger than WINDOW.
E31_NOTICE_RECONCILE_SETTLE_S = env_float("E31_NOTICE_RECONCILE_SETTLE_S", 300.0)
E31_NOTICE_RECONCILE_WINDOW_S = env_float("E31_NOTICE_RECONCILE_WINDOW_S", 86400.0)

# Celery: https://docs.celeryq.dev/en/stable/userguide/configuration.html
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_TASK_ALWAYS_EAGER = env_bool("E31_CELERY_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True  # tasks are idempotent; a lost worker re-runs them
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Two queues, so side work (mail) can never stall the core (issue 12): "core" carries
# scheduling cycles and the node watch (its own worker, `core` in the Procfile); "side"
# carries everything else. https://docs.celeryq.dev/en/stable/userguide/routing.html
CELERY_TASK_DEFAULT_QUEUE = "side"
CELERY_TASK_ROUTES = {"apps.scheduling.tasks.*": {"queue": "core"}, "apps.jobs.tasks.*": {"queue": "core"}}
# Every task has limits (seconds): soft raises SoftTimeLimitExceeded inside the task, hard
# kills the worker child. https://docs.celeryq.dev/en/stable/userguide/workers.html#time-limits
CELERY_TASK_SOFT_TIME_LIMIT = env_int("E31_TASK_SOFT_TIME_LIMIT_S", 60)
CELERY_TASK_TIME_LIMIT = env_int("E31_TASK_TIME_LIMIT_S", 90)
# The tasks with limits of their own (seconds; apps/*/tasks.py read them): the daily storage sweep, and
# the verification of a bundle uploaded straight to the object store (a 1 TB archive read at 50 MB/s).
E31_SWEEP_SOFT_TIME_LIMIT_S, E31_SWEEP_TIME_LIMIT_S = 3600, 3900
E31_BUNDLE_VERIFY_SOFT_TIME_LIMIT_S, E31_BUNDLE_VERIFY_TIME_LIMIT_S = 6 * 3600, 6 * 3600 + 60
# With acks_late a Redis broker hands a task that is not acked within the visibility timeout (default
# 1 h) to another worker, even while the first still runs it (issue 26): so it lies above the longest
# hard limit, plus 10 min for the wait between delivery and start. A task whose worker died is
# redelivered only after it; notices do not wait that long (apps/notices reconcile them).
# https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
E31_LONGEST_TASK_TIME_LIMIT_S = max(CELERY_TASK_TIME_LIMIT, E31_SWEEP_TIME_LIMIT_S, E31_BUNDLE_VERIFY_TIME_LIMIT_S)
# polling_interval: seconds a worker's blocking read of the queues lasts (kombu's default 1 s); a warm
# shutdown waits for it, so LocalStack's short-lived workers take 0.2 s (E31_CELERY_POLL_S) and stop in
# under a second, not 1.7 s.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": E31_LONGEST_TASK_TIME_LIMIT_S + 600,
                                   "polling_interval": env_float("E31_CELERY_POLL_S", 1.0)}
CELERY_BEAT_SCHEDULE = {
    "schedule-cycle": {
        "task": "apps.scheduling.tasks.schedule_cycle_task",
        "schedule": env_float("E31_SCHEDULER_PERIOD_S", 5.0),
    },
    "node-watch": {
        "task": "apps.jobs.tasks.node_watch_task",
        "schedule": env_float("E31_NODE_WATCH_PERIOD_S", 5.0),
    },
    # Budget alerts (issue 16): spend grows with the clock while runs go, so it is checked periodically.
    "budget-alerts": {
        "task": "apps.metering.tasks.budget_alerts_task",
        "schedule": env_float("E31_BUDGET_PERIOD_S", 60.0),
    },
    # Retention (issue 15): expired bundles, unreferenced uploads, expired logs, old agent reports.
    "sweep-storage": {
        "task": "apps.agent_api.tasks.sweep_storage_task",
        "schedule": env_float("E31_SWEEP_PERIOD_S", 86400.0),
    },
    # Release e-mails a lost or failed side task left unsent (issue 26; apps/notices/reconcile.py).
    "notice-reconcile": {
        "task": "apps.notices.tasks.release_emails_reconcile_task",
        "schedule": env_float("E31_NOTICE_RECONCILE_PERIOD_S", 300.0),
    },
    # Unverified direct uploads to the object store that were given up (issue 15; apps/artifacts/direct.py).
    "storage-staging-sweep": {
        "task": "apps.artifacts.tasks.staging_sweep_task",
        "schedule": env_float("E31_STORAGE_STAGING_SWEEP_S", 3600.0),
    },
    # Webhook retries due, and first tries whose task was lost (issue 25 item 6; apps/hooks/delivery.py).
    "webhook-sweep": {
        "task": "apps.hooks.tasks.webhook_sweep_task",
        "schedule": env_float("E31_WEBHOOK_SWEEP_PERIOD_S", 30.0),
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("E31_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
if not E31_LINT:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# WhiteNoise serves STATIC_ROOT (collectstatic, at deploy); while it is empty (`make run`, tests) it
# serves static/ and the apps' static files where they lie (finders), so nothing has to be collected.
WHITENOISE_USE_FINDERS = env_bool("E31_STATIC_FINDERS", not STATIC_ROOT.is_dir() or not any(STATIC_ROOT.iterdir()))
MEDIA_ROOT = Path(env_str("E31_MEDIA_ROOT", str(VAR_DIR / "media")))
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
STORAGES = {
    "default": {"BACKEND": env_str("E31_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage")},
    # WhiteNoise (issue 15, e31site/staticasgi.py): collectstatic writes a .gz (.br with brotli)
    # beside each file. Not the Manifest variant: the vendored chart.umd.min.js names a source map
    # that is not vendored, which fails its post-processing; names stay plain (ETag and 304 instead).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Where uploads and bundles are kept (issue 15; docs/deploy.md "Storage"): ``file:///dir`` (local files,
# the default: MEDIA_ROOT) or ``s3://bucket[/prefix]?endpoint_url=...&region=...&addressing_style=...``,
# any S3-compatible store through django-storages' S3Storage; credentials from the standard AWS
# variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the instance's role). apps/artifacts/storage.py.
E31_STORAGE_URL = env_str("E31_STORAGE_URL", "")
E31_STORAGE_URL_EXPIRY_S = env_int("E31_STORAGE_URL_EXPIRY_S", 300)  # signed GETs (downloads, inputs)
E31_STORAGE_PART_URL_EXPIRY_S = env_int("E31_STORAGE_PART_URL_EXPIRY_S", 3600)  # signed part PUTs
E31_STORAGE_PART_BYTES = env_int("E31_STORAGE_PART_BYTES", 64 * 1024 * 1024)  # S3 multipart part size
E31_STORAGE_STAGING_MAX_AGE_S = env_int("E31_STORAGE_STAGING_MAX_AGE_S", 86400)  # unverified uploads kept
if E31_STORAGE_URL:
    _store = urlparse(E31_STORAGE_URL)
    _store_q = {k: v[-1] for k, v in parse_qs(_store.query).items()}
    if _store.scheme == "file":
        MEDIA_ROOT = Path(_store.path)
        STORAGES["default"] = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
    elif _store.scheme == "s3":
        STORAGES["default"] = {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
            "bucket_name": _store.netloc,
            "location": _store.path.strip("/"),
            "endpoint_url": _store_q.get("endpoint_url") or None,
            "region_name": _store_q.get("region") or None,
            "addressing_style": _store_q.get("addressing_style") or None,
            "signature_version": "s3v4",
            "querystring_expire": E31_STORAGE_URL_EXPIRY_S,
            "file_overwrite": True,
        }}
    else:
        raise ValueError(f"E31_STORAGE_URL: {_store.scheme!r} is neither file:// nor s3://")

DATA_UPLOAD_MAX_MEMORY_SIZE = 34 * 1024 * 1024  # a bundle chunk is at most 32 MiB (apps/artifacts/services.py)
# A file part of a multipart body past this goes to a temporary file, not memory; the
# ASGI handler spools the raw body to disk past it too (docs/deploy.md "Request bodies").
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
E31_UPLOAD_MAX_BYTES = env_int("E31_UPLOAD_MAX_BYTES", 1024 * 1024 * 1024)
# Largest body a caller with no valid token or session may send (a sign-in form); a larger one is
# refused 401/403 before it is read (e31site/bodylimit.py).
E31_ANON_BODY_MAX_BYTES = env_int("E31_ANON_BODY_MAX_BYTES", 64 * 1024)
# Largest output bundle a job may return, bytes (issue 4, item 8); told to agents in each assignment
E31_BUNDLE_MAX_BYTES = env_int("E31_BUNDLE_MAX_BYTES", 50 * 1000**3)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: an anonymous call then answers 401 with WWW-Authenticate, not 403.
        "apps.tokens.auth.HashedTokenAuthentication",  # keys stored hashed (issue 11)
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "EXCEPTION_HANDLER": "apps.jobs.api.errors.exception_handler",
    # ?format= belongs to views (usage CSV), not to content negotiation.
    "URL_FORMAT_OVERRIDE": None,
    "DEFAULT_PARSER_CLASSES": [
        "apps.jobs.api.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
# named as such in the API schema
AGENT_ENUMS = (ReportType, ExitReason, FinishCode, ErrorCode, PrestageState, HealthSource)
SPECTACULAR_SETTINGS = {
    "TITLE": "E31 Network API",
    "DESCRIPTION": "Submit, rent, run, output, release: rent GPUs to jobs.",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The agents' calls (tag "agent") follow this version of the agent protocol (docs/agent-protocol.md).
    "EXTENSIONS_INFO": {"x-e31-agent-protocol": PROTOCOL_VERSION},
    "ENUM_NAME_OVERRIDES": {f"{enum.__name__}Enum": [c.value for c in enum] for enum in AGENT_ENUMS},
}

# Sign-in throttling (django-axes, https://django-axes.readthedocs.io/): after
# E31_SIGNIN_FAILURES wrong passwords for one account, or from one address, sign-in
# is refused (429) for E31_SIGNIN_COOLOFF_S seconds, even with the right password.
AXES_FAILURE_LIMIT = env_int("E31_SIGNIN_FAILURES", 10)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("E31_SIGNIN_COOLOFF_S", 15 * 60))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own: per account and per address
AXES_RESET_ON_SUCCESS = True
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]  # behind a proxy: set E31_PROXY_IP_HEADER
if env_str("E31_PROXY_IP_HEADER"):
    AXES_IPWARE_META_PRECEDENCE_ORDER = [env_str("E31_PROXY_IP_HEADER"), "REMOTE_ADDR"]
AXES_VERBOSE = False

# HTTPS (E31_HTTPS=1 behind TLS): cookies only over HTTPS, HSTS, http -> https.
E31_HTTPS = env_bool("E31_HTTPS", False)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if E31_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("E31_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("E31_HSTS_SUBDOMAINS", False)
    SECURE_SSL_REDIRECT = env_bool("E31_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # the TLS proxy must set (or strip) it
    # agents are told the https URL (never bounce their bodies); a load balancer probes health over plain HTTP
    SECURE_REDIRECT_EXEMPT = [r"^api/v1/agent/", r"^healthz$", r"^readyz$"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("E31_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # 4xx answers are the caller's mistake, not ours: no warning with a traceback for an
        # ordinary 403/404 (5xx still log at ERROR with theirs).
        "django.request": {"level": "ERROR"},
        "uvicorn.access": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},  # one line per task is noise in standalone
    },
}

# --- E31 policy (SPEC §2-§5); each overridable by E31_<NAME> ---------------
E31_TIME_LIMIT_MAX_S = env_int("E31_TIME_LIMIT_MAX_S", 7 * 24 * 3600)
E31_GRACE_S = env_int("E31_GRACE_S", 30)
# Seconds past a run's limit + grace the server waits for an agent that says nothing before it ends the
# run itself (SPEC §3): room for the agent's own stop, pack and report to arrive first.
E31_TIME_LIMIT_SLACK_S = env_int("E31_TIME_LIMIT_SLACK_S", 30)
E31_HEARTBEAT_S = env_int("E31_HEARTBEAT_S", 10)
E31_NODE_LOSS_TIMEOUT_S = env_int("E31_NODE_LOSS_TIMEOUT_S", 30)
# A GPU with no lease and more memory in use than this (MiB) is quarantined (issue 26 item 3): an idle
# data-centre GPU shows a few MiB to a few hundred (the driver, persistence mode).
E31_GPU_IDLE_MEMORY_MIB = env_int("E31_GPU_IDLE_MEMORY_MIB", 1024)
E31_MAX_ATTEMPTS = env_int("E31_MAX_ATTEMPTS", 2)
E31_LOG_MAX_BYTES = env_int("E31_LOG_MAX_BYTES", 10 * 1024 * 1024)
# Usage samples kept per job attempt and node rank (charts); past it the older ones are thinned.
E31_JOB_SAMPLES_MAX = env_int("E31_JOB_SAMPLES_MAX", 1000)
E31_RETENTION_DAYS_DEFAULT = env_int("E31_RETENTION_DAYS_DEFAULT", 7)
E31_RETENTION_DAYS_MAX = env_int("E31_RETENTION_DAYS_MAX", 30)
# The storage sweep (issue 15, apps.agent_api.retention): an upload no live job names is deleted
# this many days after it was uploaded; agent reports of released jobs after this many days.
E31_UPLOAD_GRACE_DAYS = env_int("E31_UPLOAD_GRACE_DAYS", 2)
E31_AGENT_REPORTS_KEEP_DAYS = env_int("E31_AGENT_REPORTS_KEEP_DAYS", 30)
# Secrets (issue 23, apps/secrets/crypto.py): Fernet keys, comma-separated, the first encrypts; unset,
# the key file below, generated on first use (not here: importing the settings writes nothing more).
E31_SECRETS_KEY = env_str("E31_SECRETS_KEY", "")
E31_SECRETS_KEY_FILE = Path(env_str("E31_SECRETS_KEY_FILE", str(VAR_DIR / "secrets_key")))
# Directories a spec may read with file:// (empty: file:// refused).
E31_FILE_ROOTS = env_list("E31_FILE_ROOTS", [])
# Non-public hosts/CIDRs a data source may name outright (default none: refused at submit, SPEC §2).
E31_DATA_ALLOW_HOSTS = env_list("E31_DATA_ALLOW_HOSTS", [])
# Webhooks (issue 25 item 6, apps/hooks): host:port endpoints allowed despite the SSRF guard (default none);
# a CA bundle to verify receivers' TLS with (default: the system's CAs); timeouts and retries in seconds.
E31_WEBHOOK_ALLOW_HOSTS = env_list("E31_WEBHOOK_ALLOW_HOSTS", [])
E31_WEBHOOK_CA_BUNDLE = env_str("E31_WEBHOOK_CA_BUNDLE", "")
E31_WEBHOOK_CONNECT_TIMEOUT_S = env_float("E31_WEBHOOK_CONNECT_TIMEOUT_S", 5.0)
E31_WEBHOOK_TIMEOUT_S = env_float("E31_WEBHOOK_TIMEOUT_S", 10.0)
E31_WEBHOOK_RETRY_FIRST_S = env_float("E31_WEBHOOK_RETRY_FIRST_S", 30.0)
E31_WEBHOOK_RETRY_MAX_S = env_float("E31_WEBHOOK_RETRY_MAX_S", 3600.0)
E31_WEBHOOK_GIVE_UP_S = env_float("E31_WEBHOOK_GIVE_UP_S", 86400.0)
# With eager Celery (standalone) a try runs on a thread of the process, never inside the commit that asked.
E31_WEBHOOK_SEND_IN_THREAD = env_bool("E31_WEBHOOK_SEND_IN_THREAD", CELERY_TASK_ALWAYS_EAGER)
E31_EXAMPLES_DIR = Path(env_str("E31_EXAMPLES_DIR", str(BASE_DIR / "examples")))
E31_AGENT_POLL_WAIT_S = env_int("E31_AGENT_POLL_WAIT_S", 20)
E31_SCHEDULER_POLICY = env_str("E31_SCHEDULER_POLICY", "e31")  # fifo | easy | e31 (apps/pool/scheduler)
# Scheduling policy knobs (apps.scheduling.core.PolicyConfig; weights as in Slurm's
# priority/multifactor plugin, https://slurm.schedmd.com/priority_multifactor.html).
# Each is read from E31_POLICY_<FIELD> (e.g. E31_POLICY_RESERVATION_DEPTH=2) when set;
# unset ones keep the core's tuned defaults, documented on PolicyConfig.
E31_POLICY_OVERRIDES = {
    key[len("E31_POLICY_"):].lower(): value for key, value in os.environ.items() if key.startswith("E31_POLICY_")
}
E31_FAIRSHARE_HALF_LIFE_S = env_float("E31_FAIRSHARE_HALF_LIFE_S", 7 * 86400.0)
E31_CYCLE_STATS_KEEP = env_int("E31_CYCLE_STATS_KEEP", 500)
# /metrics answers only `Authorization: Bearer <this>` (docs/deploy.md); empty: /metrics is closed (401).
# `make run` generates one into var/metrics_token (e31site/standalone.py).
E31_METRICS_TOKEN = env_str("E31_METRICS_TOKEN")
# Pre-staging (issue 14 item 5, apps.scheduling.core.prestage): a queued job's inputs go to its planned
# node(s) once its likely start is within input bytes / rate; the rate is the node's measured one, else
# this default (bytes per second). Inputs of unknown size (not uploads) count as the next setting (bytes).
# At most PER_NODE jobs pre-stage on one node and PER_CYCLE jobs in all.
E31_PRESTAGE_DEFAULT_RATE_BPS = env_float("E31_PRESTAGE_DEFAULT_RATE_BPS", 100e6)
E31_PRESTAGE_UNKNOWN_INPUT_BYTES = env_int("E31_PRESTAGE_UNKNOWN_INPUT_BYTES", 10**9)
E31_PRESTAGE_PER_NODE = env_int("E31_PRESTAGE_PER_NODE", 4)
E31_PRESTAGE_PER_CYCLE = env_int("E31_PRESTAGE_PER_CYCLE", 64)
# The New job price panel quotes start times (issue 29 item 4) while at most this many jobs are queued:
# each quote runs the scheduler's core once per GPU model (about 0.6 s at 10,000 queued), and the
# panel asks as the user types. The API's dry run always quotes.
E31_QUOTE_FORM_MAX_QUEUED = env_int("E31_QUOTE_FORM_MAX_QUEUED", 2000)
