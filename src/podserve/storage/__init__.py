"""Model storage: URIs, digests, the node cache and the fetchers.

Imports only podserve.core (enforced by import-linter); boto3 and huggingface_hub are
optional extras imported when an s3:// or hf:// URI is fetched.
"""

from podserve.storage.cache import ModelCache
from podserve.storage.digest import (
    Digest,
    Manifest,
    artifacts_manifest,
    compute_digest,
    compute_manifest,
)
from podserve.storage.errors import (
    CacheCorrupted,
    DigestMismatch,
    FetchNetworkError,
    InvalidModelURI,
    MissingExtra,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    StorageError,
)
from podserve.storage.fetch import FetchResult, ensure_local, fetch_model, release_local
from podserve.storage.fetchers import Fetcher, SourceOptions
from podserve.storage.progress import Phase, Progress, progress_for
from podserve.storage.uri import ModelURI, Scheme, parse_model_uri

__all__ = [
    "CacheCorrupted",
    "Digest",
    "DigestMismatch",
    "FetchNetworkError",
    "FetchResult",
    "Fetcher",
    "InvalidModelURI",
    "Manifest",
    "MissingExtra",
    "ModelCache",
    "ModelNotFoundAtSource",
    "ModelURI",
    "Phase",
    "Progress",
    "Scheme",
    "SourceAccessDenied",
    "SourceOptions",
    "StorageError",
    "artifacts_manifest",
    "compute_digest",
    "compute_manifest",
    "ensure_local",
    "fetch_model",
    "parse_model_uri",
    "progress_for",
    "release_local",
]
