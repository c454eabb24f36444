"""kueueweb settings: one module, every value from the environment.

Two modes, chosen by environment variables only:

* embedded (default): SQLite, an in-memory channel layer, and the reconcilers run by a loop
  inside the web process. Nothing but Python is needed.
* production: ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` set. Celery workers and beat run
  the reconcilers; Channels uses Redis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from kueueweb import reconcile
from kueueweb.env import (
    DEVELOPMENT_SECRET_KEY,
    check_fernet_key,
    check_secret_key,
    derived_fernet_key,
    env_bool,
    env_float,
    env_int,
    env_json,
    env_list,
    env_secret,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("KUEUEWEB_VAR_DIR", str(BASE_DIR / "var")))

# --- Core Django -------------------------------------------------------------------------

DEBUG = env_bool("DEBUG", True)
# Values marked sensitive (a kubeconfig) stay hidden on the debug page too.
DEFAULT_EXCEPTION_REPORTER_FILTER = "kueueweb.debug.ExceptionReporterFilter"

SECRET_KEY = (env_secret("SECRET_KEY") or "").strip()
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. With DEBUG off kueueweb refuses to start on a default "
            "secret: set SECRET_KEY (or SECRET_KEY_FILE) to a long random string."
        )
    SECRET_KEY = DEVELOPMENT_SECRET_KEY
elif not DEBUG:
    check_secret_key("SECRET_KEY", SECRET_KEY)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "kueueweb.apps.KueuewebConfig",
    "scheduling.apps.SchedulingConfig",
    "multicluster.apps.MulticlusterConfig",
    "tools.apps.ToolsConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so it sees the database errors of the views: 503 instead of a 500 page.
    "kueueweb.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "kueueweb.urls"
ASGI_APPLICATION = "kueueweb.asgi.application"
WSGI_APPLICATION = "kueueweb.wsgi.application"

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

# --- Database ----------------------------------------------------------------------------
# DATABASE_URL selects the database (postgres://… or sqlite:///path); the embedded default is
# a SQLite file under var/.

DATABASE_URL = env_str("DATABASE_URL", "")
if not DATABASE_URL:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
# CONN_HEALTH_CHECKS: a persistent connection that died (database restarted, backend
# terminated) is noticed and replaced at the start of the next request instead of failing it.
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
                                              conn_health_checks=True)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Fail fast when the database cannot be reached, rather than at the OS's TCP timeout.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env_int("DB_CONNECT_TIMEOUT_SECONDS", 5))
    # No JIT compilation: every query here is short, and the planner's cost estimates of
    # the admission's recursive head query passed jit_above_cost once the table had
    # statistics, and compiling took many times longer than running the query. (A
    # DATABASE_URL's own ``?options=`` wins.)
    DATABASES["default"]["OPTIONS"].setdefault("options", "-c jit=off")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while the reconciler loop writes; the timeout makes a
    # writer wait for the lock instead of failing at once. Transactions take the write lock
    # when they begin (IMMEDIATE): a deferred one that read first cannot wait for it later,
    # SQLite fails it at once with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE",
         "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
    )
    # The same backend, whose threads hand the write lock on without SQLite's busy polling.
    DATABASES["default"]["ENGINE"] = "kueueweb.db.sqlite3"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, Celery, Channels -------------------------------------------------------------

REDIS_URL = env_str("REDIS_URL", "")
# The reconcilers run in Celery only when there is a broker; otherwise the web process runs
# them in a loop of its own (kueueweb.embedded).
RECONCILER_MODE = "celery" if REDIS_URL else "embedded"

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
# Every task is idempotent (ids in; it reads the database and converges), so running one
# twice is harmless and losing one is not. A message is acknowledged only once its task
# finished (acks late); a task whose worker process died is put back (reject on worker
# lost); a worker reserves one message at a time, so a crash strands at most one per
# process. A whole worker host that dies leaves its message unacknowledged in Redis, which
# redelivers it after the visibility timeout; Celery beat asks every domain for a cycle
# every few seconds anyway (the safety net), so nothing waits that long.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fix-up closes every database connection around every task unless this is
# set; then it does so once in this many tasks. Between those, workers keep connections as
# the embedded loop does (``kueueweb.connections``).
CELERY_DB_REUSE_MAX = 1000
# Longer than any task runs and than any countdown (``kueueweb.reconcile`` caps countdowns
# below it), else a waiting message would be delivered a second time.
CELERY_VISIBILITY_TIMEOUT_SECONDS = env_int("KUEUEWEB_CELERY_VISIBILITY_TIMEOUT_SECONDS", 600)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_VISIBILITY_TIMEOUT_SECONDS,
    # Bounded waits on a broker that is down or unreachable: a web request that asks for a
    # task must not hang on it (``kueueweb.reconcile`` logs and moves on).
    "socket_connect_timeout": 3.0,
    "socket_timeout": 10.0,
    # A worker reads its queues in the order given, not in turn: beat's first (below).
    "queue_order_strategy": "priority",
}
CELERY_BROKER_CONNECTION_TIMEOUT = 3.0
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker whose broker went away reconnects for as long as it takes (Celery's default gives
# up after 100 attempts and the worker exits).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Sending a task retries once or twice, briefly (a pooled connection that died with a Redis
# restart is replaced), then fails fast.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
}
# Tasks running when the broker connection is lost finish their database work; their
# acknowledgement is lost with the connection, so Redis redelivers them (idempotent).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

RECONCILE_INTERVAL_SECONDS = env_float("KUEUEWEB_RECONCILE_INTERVAL_SECONDS", 5.0)
# Periodic reconcilers. Celery beat sends these in production; the embedded loop calls the
# same task functions on the same periods.
LIFECYCLE_INTERVAL_SECONDS = env_int("KUEUEWEB_LIFECYCLE_INTERVAL_SECONDS", 5)
CLUSTER_SYNC_INTERVAL_SECONDS = env_int("KUEUEWEB_CLUSTER_SYNC_INTERVAL_SECONDS", 5)
# How often the overview's usage history is sampled (one row per cluster queue).
USAGE_SAMPLE_INTERVAL_SECONDS = env_int("KUEUEWEB_USAGE_SAMPLE_INTERVAL_SECONDS", 60)
# Schedules are in minutes: a pass this often runs each due time at most this late.
CRONJOB_INTERVAL_SECONDS = env_int("KUEUEWEB_CRONJOB_INTERVAL_SECONDS", 10)
# The Deployments' ReplicaSet controller: a change of a Deployment asks for its pass at once;
# this pass replaces the Pods Kueue stopped and deleted.
REPLICAS_INTERVAL_SECONDS = env_int("KUEUEWEB_REPLICAS_INTERVAL_SECONDS", 5)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "admission-all-domains": {
        "task": reconcile.ADMISSION_ALL_TASK,
        "schedule": RECONCILE_INTERVAL_SECONDS,
    },
    "lifecycle-all-domains": {
        "task": reconcile.LIFECYCLE_ALL_TASK,
        "schedule": LIFECYCLE_INTERVAL_SECONDS,
    },
    # A pass of every cluster's reconciler, simulated or Kubernetes (connect, start, scale,
    # stop, report).
    "sync-all-clusters": {
        "task": reconcile.CLUSTER_SYNC_ALL_TASK,
        "schedule": CLUSTER_SYNC_INTERVAL_SECONDS,
    },
    "sample-queue-usage": {
        "task": reconcile.SAMPLE_USAGE_TASK,
        "schedule": USAGE_SAMPLE_INTERVAL_SECONDS,
    },
    "cronjobs": {
        "task": reconcile.CRONJOB_ALL_TASK,
        "schedule": CRONJOB_INTERVAL_SECONDS,
    },
    "deployments": {
        "task": reconcile.REPLICAS_ALL_TASK,
        "schedule": REPLICAS_INTERVAL_SECONDS,
    },
}

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "capacity": 5000, "expiry": 30},
        }
    }
    # Bounded waits: rate limits and the kube backend's watch state live in this cache, so a
    # Redis that hangs must not hang every request with it.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": {"socket_connect_timeout": 3, "socket_timeout": 5}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Auth, sessions, security ------------------------------------------------------------

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Kubeconfigs of worker clusters are stored encrypted with this key (Fernet: 32 url-safe
# base64-encoded bytes). In development a key is derived from SECRET_KEY.
_fernet_key = (env_secret("KUEUEWEB_ENCRYPTION_KEY") or "").strip()
if not _fernet_key:
    if not DEBUG:
        raise ImproperlyConfigured(
            "KUEUEWEB_ENCRYPTION_KEY is not set. With DEBUG off kueueweb refuses to store "
            "kubeconfigs under a derived key: generate one with `python -c \"from "
            "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())\"`."
        )
    _fernet_key = derived_fernet_key(SECRET_KEY)
else:
    # Checked here, not at the first kubeconfig upload.
    check_fernet_key("KUEUEWEB_ENCRYPTION_KEY", _fernet_key)
KUEUEWEB_ENCRYPTION_KEY = _fernet_key

# --- REST framework ----------------------------------------------------------------------

# Reverse proxies in front of the web processes, each appending the address it saw to
# X-Forwarded-For: the client's address is the entry the outermost one appended
# (``kueueweb.throttling.client_address``); what the client wrote itself is never trusted.
NUM_PROXIES = env_int("KUEUEWEB_NUM_PROXIES", 0)
if NUM_PROXIES < 0:
    raise ImproperlyConfigured(f"KUEUEWEB_NUM_PROXIES must be 0 or more, not {NUM_PROXIES}")
if NUM_PROXIES:
    # The proxy sets X-Forwarded-Proto (replacing any the client sent): requests that reached
    # it over TLS count as secure.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Rate limits (kueueweb.throttling): API requests per user and per anonymous address, and
# failed sign-ins and API tokens per client, counted in this cache (Redis in production, so
# every web process sees the same counts).
KUEUEWEB_RATE_LIMIT_CACHE = "default"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "kueueweb.throttling.ThrottledTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["kueueweb.throttling.UserRate", "kueueweb.throttling.AnonRate"],
    # "N/second|minute|hour|day"; "off" for no limit.
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("KUEUEWEB_API_RATE_USER", "6000/minute"),
        "anon": env_str("KUEUEWEB_API_RATE_ANON", "120/minute"),
    },
    # Behind N reverse proxies the client's address is taken from X-Forwarded-For.
    "NUM_PROXIES": NUM_PROXIES or None,
    "DEFAULT_PERMISSION_CLASSES": ["kueueweb.permissions.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "kueueweb.pagination.ListPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kueueweb.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "kueueweb API",
    "DESCRIPTION": "Kueue's objects (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, Workload, "
    "...) in Kueue's own shape, plus the jobs of the enabled kinds (batch/v1 Jobs, ...), worker "
    "clusters and MultiKueue.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Like every page but login and the health check, the schema needs a signed-in user.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Static files, i18n ------------------------------------------------------------------

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Front-end libraries come from npm (package-lock.json; `make install` runs `npm ci`) and are
# served from node_modules under static/vendor/ without a build step. axe-core is a development
# dependency: the browser tests inject it from node_modules, it is never served.
_VENDOR = {"htmx": "htmx.org/dist", "chart.js": "chart.js/dist", "idiomorph": "idiomorph/dist"}
STATICFILES_DIRS: list[Any] = [BASE_DIR / "static"] + [
    (f"vendor/{name}", BASE_DIR / "node_modules" / path)
    for name, path in _VENDOR.items()
    if (BASE_DIR / "node_modules" / path).is_dir()
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Kueue behaviour ---------------------------------------------------------------------

KUEUEWEB: dict[str, Any] = {
    # Scheduler (Kueue Configuration): fair sharing is off unless asked for.
    "FAIR_SHARING": env_bool("KUEUEWEB_FAIR_SHARING", False),
    "FAIR_SHARING_PREEMPTION_STRATEGIES": env_list(
        "KUEUEWEB_FAIR_SHARING_PREEMPTION_STRATEGIES",
        ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
    ),
    "PARTIAL_ADMISSION": env_bool("KUEUEWEB_PARTIAL_ADMISSION", True),
    "ELASTIC_JOBS_VIA_WORKLOAD_SLICES": env_bool("KUEUEWEB_ELASTIC_JOBS_VIA_WORKLOAD_SLICES", True),
    # waitForPodsReady (Kueue v1beta2 defaults it to enabled).
    "WAIT_FOR_PODS_READY": env_bool("KUEUEWEB_WAIT_FOR_PODS_READY", True),
    "PODS_READY_TIMEOUT_SECONDS": env_int("KUEUEWEB_PODS_READY_TIMEOUT_SECONDS", 1800),
    "PODS_READY_RECOVERY_TIMEOUT_SECONDS": env_int("KUEUEWEB_PODS_READY_RECOVERY_TIMEOUT_SECONDS", 1800),
    "REQUEUE_BACKOFF_BASE_SECONDS": env_int("KUEUEWEB_REQUEUE_BACKOFF_BASE_SECONDS", 60),
    "REQUEUE_BACKOFF_MAX_SECONDS": env_int("KUEUEWEB_REQUEUE_BACKOFF_MAX_SECONDS", 3600),
    "REQUEUE_BACKOFF_LIMIT_COUNT": env_int("KUEUEWEB_REQUEUE_BACKOFF_LIMIT_COUNT", -1),
    "LABEL_KEYS_TO_COPY": env_list("KUEUEWEB_LABEL_KEYS_TO_COPY", []),
    # Which objects of a connected cluster kueueweb manages (Kueue's
    # manageJobsWithoutQueueName and managedJobsNamespaceSelector): those with a queue name,
    # and, when the first is on, those without one in the namespaces the selector matches.
    "MANAGE_JOBS_WITHOUT_QUEUE_NAME": env_bool("KUEUEWEB_MANAGE_JOBS_WITHOUT_QUEUE_NAME", False),
    "MANAGED_JOBS_NAMESPACE_SELECTOR": env_json(
        "KUEUEWEB_MANAGED_JOBS_NAMESPACE_SELECTOR",
        {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                               "values": ["kube-system", "kueue-system"]}]}),
    # The job kinds accepted (Kueue's integrations.frameworks), by framework name; checked
    # against the registered kinds (scheduling/jobs) at startup. The default is what Kueue's
    # shipped controller config enables of the kinds kueueweb has (its API default is Job
    # alone).
    "INTEGRATIONS_FRAMEWORKS": env_list("KUEUEWEB_INTEGRATIONS_FRAMEWORKS",
                                        ["batch/job", "jobset.x-k8s.io/jobset",
                                         "kubeflow.org/mpijob", "ray.io/raycluster",
                                         "ray.io/rayjob", "ray.io/rayservice",
                                         "trainer.kubeflow.org/trainjob"]),
    # The ClusterTrainingRuntimes and TrainingRuntimes TrainJobs may name: YAML files of
    # them, as they would be applied beside Kubeflow Trainer (comma-separated paths).
    "TRAINING_RUNTIMES": env_list("KUEUEWEB_TRAINING_RUNTIMES", []),
    # MultiKueue.
    "MULTIKUEUE_ORIGIN": env_str("KUEUEWEB_MULTIKUEUE_ORIGIN", "multikueue"),
    # Kinds whose controller lives outside Kueue, dispatched through MultiKueue's generic
    # adapter (Kueue's multiKueue.externalFrameworks): Kind.version.group, comma-separated;
    # checked at startup (scheduling/jobs/external.py).
    "MULTIKUEUE_EXTERNAL_FRAMEWORKS": env_list("KUEUEWEB_MULTIKUEUE_EXTERNAL_FRAMEWORKS", []),
    "MULTIKUEUE_WORKER_LOST_TIMEOUT_SECONDS": env_int("KUEUEWEB_WORKER_LOST_TIMEOUT_SECONDS", 900),
    "MULTIKUEUE_GC_INTERVAL_SECONDS": env_int("KUEUEWEB_MULTIKUEUE_GC_INTERVAL_SECONDS", 60),
    "DISPATCH_STEP_SIZE": env_int("KUEUEWEB_DISPATCH_STEP_SIZE", 3),
    "DISPATCH_ROUND_TIMEOUT_SECONDS": env_int("KUEUEWEB_DISPATCH_ROUND_TIMEOUT_SECONDS", 300),
    # Kubernetes clusters (multicluster/kube): a timeout on every API call, how long a watch
    # is read per pass, probe and lease periods; kubeconfigs naming local files or commands
    # (exec, auth-provider, tokenFile, certificate paths) are refused unless allowed.
    "KUBE_REQUEST_TIMEOUT_SECONDS": env_float("KUEUEWEB_KUBE_REQUEST_TIMEOUT_SECONDS", 10.0),
    "KUBE_WATCH_QUIET_SECONDS": env_float("KUEUEWEB_KUBE_WATCH_QUIET_SECONDS", 1.0),
    "KUBE_WATCH_MAX_SECONDS": env_float("KUEUEWEB_KUBE_WATCH_MAX_SECONDS", 5.0),
    "KUBE_PROBE_INTERVAL_SECONDS": env_float("KUEUEWEB_KUBE_PROBE_INTERVAL_SECONDS", 60.0),
    "KUBE_SYNC_LEASE_SECONDS": env_float("KUEUEWEB_KUBE_SYNC_LEASE_SECONDS", 120.0),
    "KUBE_ALLOW_LOCAL_CREDENTIALS": env_bool("KUEUEWEB_KUBE_ALLOW_LOCAL_CREDENTIALS", False),
    # Periods of the lifecycle and cluster reconcilers (each also wakes itself at its next
    # deadline when that comes sooner).
    "LIFECYCLE_INTERVAL_SECONDS": LIFECYCLE_INTERVAL_SECONDS,
    "CLUSTER_SYNC_INTERVAL_SECONDS": CLUSTER_SYNC_INTERVAL_SECONDS,
    # Simulated clusters: defaults for Cluster.simulation, and kube-scheduler's gang timeout.
    "SIMULATION_START_DELAY_SECONDS": env_int("KUEUEWEB_SIMULATION_START_DELAY_SECONDS", 5),
    "SIMULATION_DEFAULT_RUN_SECONDS": env_int("KUEUEWEB_SIMULATION_DEFAULT_RUN_SECONDS", 60),
    "GANG_SCHEDULING_TIMEOUT_SECONDS": env_int("KUEUEWEB_GANG_SCHEDULING_TIMEOUT_SECONDS", 300),
    # The simulated cluster autoscaler: how long a ProvisioningRequest takes to be
    # provisioned, and the most nodes it adds for one request (more fails the request).
    "SIMULATION_PROVISIONING_DELAY_SECONDS": env_int(
        "KUEUEWEB_SIMULATION_PROVISIONING_DELAY_SECONDS", 10),
    "SIMULATION_PROVISIONING_MAX_NODES": env_int(
        "KUEUEWEB_SIMULATION_PROVISIONING_MAX_NODES", 100),
    # The simulated cluster a fresh install starts with.
    "DEFAULT_NODE_COUNT": env_int("KUEUEWEB_DEFAULT_NODE_COUNT", 4),
    "DEFAULT_NODE_CPU": env_str("KUEUEWEB_DEFAULT_NODE_CPU", "16"),
    "DEFAULT_NODE_MEMORY": env_str("KUEUEWEB_DEFAULT_NODE_MEMORY", "64Gi"),
    # Admission lease: how long a cycle may hold a domain before another worker takes over.
    "ADMISSION_LEASE_SECONDS": env_int("KUEUEWEB_ADMISSION_LEASE_SECONDS", 30),
    # Kueue's requeueBatchPeriod: parked workloads of a queue whose cohort tree got quota
    # back are requeued together this long after the first release. Kueue waits 1 s because
    # its requeue moves every inadmissible workload back to the heap; ours deletes the
    # tree's parked shapes and flips the few heads parked one by one, and the releases that
    # come during a cycle already share the next one (the lease's ``wanted`` flag). So the
    # default is 0: the next cycle requeues; 1 restores Kueue's timing.
    "REQUEUE_BATCH_PERIOD_SECONDS": env_float("KUEUEWEB_REQUEUE_BATCH_PERIOD_SECONDS", 0.0),
    # Largest YAML/JSON body accepted by apply and job submission.
    "MAX_MANIFEST_BYTES": env_int("KUEUEWEB_MAX_MANIFEST_BYTES", 1024 * 1024),
    # Failed sign-ins per username and address, and unknown API tokens per address, allowed
    # in a window before that client is refused until the window ends (kueueweb.throttling).
    "LOGIN_FAILURE_LIMIT": env_int("KUEUEWEB_LOGIN_FAILURE_LIMIT", 5),
    "LOGIN_FAILURE_WINDOW_SECONDS": env_int("KUEUEWEB_LOGIN_FAILURE_WINDOW_SECONDS", 900),
    "TOKEN_FAILURE_LIMIT": env_int("KUEUEWEB_TOKEN_FAILURE_LIMIT", 20),
    "TOKEN_FAILURE_WINDOW_SECONDS": env_int("KUEUEWEB_TOKEN_FAILURE_WINDOW_SECONDS", 900),
    # Demo traffic (scheduling/demo/traffic.py): jobs into the demo's queues every N seconds
    # (0: off; `make run` sets 15) while fewer than MAX_PENDING workloads wait; its finished
    # jobs are deleted after KEEP_FINISHED_MINUTES.
    "DEMO_TRAFFIC_INTERVAL_SECONDS": env_float("KUEUEWEB_DEMO_TRAFFIC_INTERVAL_SECONDS", 0.0),
    "DEMO_TRAFFIC_MAX_PENDING": env_int("KUEUEWEB_DEMO_TRAFFIC_MAX_PENDING", 12),
    "DEMO_TRAFFIC_KEEP_FINISHED_MINUTES": env_int("KUEUEWEB_DEMO_TRAFFIC_KEEP_FINISHED_MINUTES",
                                                  30),
}
# MultiKueue: the hub's dispatch pass, and the garbage collector of orphaned remote copies.
CELERY_BEAT_SCHEDULE["multikueue-dispatch"] = {
    "task": reconcile.DISPATCH_ALL_TASK,
    "schedule": CLUSTER_SYNC_INTERVAL_SECONDS,
}
if KUEUEWEB["MULTIKUEUE_GC_INTERVAL_SECONDS"] > 0:
    CELERY_BEAT_SCHEDULE["multikueue-garbage-collector"] = {
        "task": reconcile.GARBAGE_COLLECT_TASK,
        "schedule": KUEUEWEB["MULTIKUEUE_GC_INTERVAL_SECONDS"],
    }
if KUEUEWEB["DEMO_TRAFFIC_INTERVAL_SECONDS"] > 0:
    CELERY_BEAT_SCHEDULE["demo-traffic"] = {
        "task": reconcile.DEMO_TRAFFIC_TASK,
        "schedule": KUEUEWEB["DEMO_TRAFFIC_INTERVAL_SECONDS"],
    }
# Celery beat's tasks go to a queue of their own, which every worker reads before the
# default one (``-Q periodic,celery``; a worker started without -Q reads the queues in the
# order listed here): a worker process that frees up takes a waiting periodic task first
# (Redis transport's "priority" order, not its default round robin), so the safety net
# never waits behind the work it is the safety net for. Beat's tasks only ask for passes
# and take milliseconds. One that still waited a whole period is dropped, since the next
# one is on its way and is taken first.
CELERY_TASK_DEFAULT_QUEUE = "celery"
PERIODIC_TASK_QUEUE = "periodic"
CELERY_TASK_QUEUES: dict[str, dict[str, Any]] = {PERIODIC_TASK_QUEUE: {}, CELERY_TASK_DEFAULT_QUEUE: {}}
for _entry in CELERY_BEAT_SCHEDULE.values():
    _entry["options"] = {"queue": PERIODIC_TASK_QUEUE, "expires": float(_entry["schedule"])}
DATA_UPLOAD_MAX_MEMORY_SIZE = KUEUEWEB["MAX_MANIFEST_BYTES"] + 64 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"client_errors_on_one_line": {"()": "kueueweb.log.ClientErrorsOnOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["client_errors_on_one_line"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's own console handler (DEBUG on) would print each record a second time
        # before the root's.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"},
    },
}

# Static files are served by WhiteNoise from STATIC_ROOT (collectstatic); in development it
# also finds them in place.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
