"""Names shared by the image, the renderer, the linter and the doctor (DESIGN §9): ports,
paths, user id, probe endpoints, and the annotations through which rendered objects tell the
linter what the spec declared (load time, longest request, spare GPU)."""

from __future__ import annotations

HTTP_PORT = 8000
GRPC_PORT = 8001
USER_ID = 10001
GROUP_ID = 10001
CACHE_DIR = "/cache"
MODEL_REPOSITORY = "/models"
SETTINGS_DIR = "/etc/podserve"
SETTINGS_FILE = "settings.yaml"
SPEC_FILE = "modelservice.yaml"

STARTUP_PATH = "/startup"
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/ready"
METRICS_PATH = "/metrics"

# Pinned by digest like every image podserve renders (the multi-arch index of pause:3.10).
PAUSE_IMAGE = (
    "registry.k8s.io/pause:3.10"
    "@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
)

# Labels.
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
TRACK_LABEL = "podserve.dev/track"
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"

# Annotations read by `podserve lint` (and written by `podserve render`).
ANNOTATION_PREFIX = "podserve.dev/"
LOAD_SECONDS = "podserve.dev/load-seconds"
LONGEST_REQUEST_SECONDS = "podserve.dev/longest-request-seconds"
SPARE_GPU = "podserve.dev/spare-gpu"
LINT_IGNORE = "podserve.dev/lint-ignore"
LINT_IGNORE_REASON = "podserve.dev/lint-ignore-reason"
MODEL_URI = "podserve.dev/model-uri"
MODEL_DIGEST = "podserve.dev/model-digest"
CONFIG_CHECKSUM = "podserve.dev/config-checksum"
CANARY_BACKEND = "podserve.dev/canary-backend"
STABLE_BACKEND = "podserve.dev/stable-backend"


def cached_model_path(digest: str) -> str:
    """Where `podserve fetch --cache-dir /cache` leaves a verified model: content-addressed
    by its digest, so two models (or two pods on one node) never collide."""
    # The layout of podserve.storage.cache: entries/<algorithm>-<hex>.
    algorithm, _, hexdigest = digest.partition(":")
    return f"{CACHE_DIR}/entries/{algorithm}-{hexdigest}"
