"""Model URIs: parse the user's string once into a typed value.

Accepted forms (a trailing `@sha256:<64 hex>` pins the digest on any of them):

    /abs/path  ./rel/path  file:///abs/path     a local file or directory
    http://host/path  https://host/path         one file
    s3://bucket/key-or-prefix                   one object, or every object under prefix/
    hf://org/name[@revision]                    a Hugging Face repository snapshot
    gs://bucket/key-or-prefix                   Cloud Storage: one object, or all under prefix/
    https://<account>.blob.core.windows.net/<container>/<path>
    https://<account>.z<N>.blob.storage.azure.net/<container>/<path>
                                                Azure Blob: one blob, or every blob under path/
    models:/name/version  models:/name@alias    an MLflow registry version (fetchers/mlflow.py)
    runs:/run_id/path                           an MLflow run's artifacts
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from podserve.storage.digest import Digest
from podserve.storage.errors import InvalidModelURI
from podserve.storage.mlflow_uri import parse_mlflow_location

# Anchored at the end so that an '@' in a URL's userinfo or in an hf revision never
# reads as a pin.
_PIN = re.compile(r"@(sha256:[0-9a-fA-F]{64})$")
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# MLflow's URIs have one slash after the colon (mlflow/store/artifact/models_artifact_repo.py).
_MLFLOW = re.compile(r"^(models|runs):/(?!/)")
# Azure Blob's public endpoints, as KServe matches them (_AZURE_BLOB_RE, see Scheme); a
# storage account name is 3-24 lowercase letters and digits (Azure docs, "Storage account
# overview", naming).
_AZURE_BLOB_HOST = re.compile(
    r"^(?P<account>[^.]+)\.(blob\.core\.windows\.net|z[0-9]{1,2}\.blob\.storage\.azure\.net)$"
)
_AZURE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")


class Scheme(enum.StrEnum):
    FILE = "file"
    HTTP = "http"
    HTTPS = "https"
    S3 = "s3"
    HF = "hf"
    GS = "gs"
    # Not a URI scheme anyone types: https URLs on Azure Blob's hosts parse to it, so that
    # they reach the Azure fetcher (the forms KServe's storage initializer accepts:
    # kserve/kserve python/storage/kserve_storage/kserve_storage.py, _AZURE_BLOB_RE).
    AZURE_BLOB = "azure-blob"
    MODELS = "models"
    RUNS = "runs"


@dataclass(frozen=True, slots=True)
class ModelURI:
    """A parsed model URI.

    `location` is scheme-specific: an absolute path (file), the full URL without the pin
    (http/https), `bucket/key` (s3, gs), `<host>/<container>/<path>` (azure-blob) or
    `org/name` (hf).
    """

    scheme: Scheme
    location: str
    revision: str | None = None
    pinned: Digest | None = None

    @property
    def is_local(self) -> bool:
        return self.scheme is Scheme.FILE

    @property
    def local_path(self) -> Path:
        if not self.is_local:
            raise InvalidModelURI(f"{self.normalized()} is not a local path")
        return Path(self.location)

    @property
    def bucket(self) -> str:
        return self.location.split("/", 1)[0]

    @property
    def key(self) -> str:
        """The object key or prefix inside the bucket ('' for the whole bucket)."""
        parts = self.location.split("/", 1)
        return parts[1] if len(parts) > 1 else ""

    def normalized(self) -> str:
        """The canonical form without the pin: equal sources give equal strings."""
        if self.scheme is Scheme.FILE:
            return f"file://{self.location}"
        if self.scheme in (Scheme.HTTP, Scheme.HTTPS):
            return self.location
        if self.scheme is Scheme.AZURE_BLOB:
            return f"https://{self.location}"
        if self.scheme in (Scheme.MODELS, Scheme.RUNS):
            # `revision` is the tracking server a registry URI was resolved on, so that equal
            # names on two servers are two cache entries.
            text = f"{self.scheme.value}:/{self.location}"
            return f"{text} on {self.revision}" if self.revision else text
        text = f"{self.scheme.value}://{self.location}"
        return f"{text}@{self.revision}" if self.revision else text

    def source_id(self) -> str:
        """A stable hex id of the normalized source (cache key of unpinned models)."""
        return hashlib.sha256(self.normalized().encode("utf-8")).hexdigest()

    def __str__(self) -> str:
        text = self.normalized()
        return f"{text}@{self.pinned}" if self.pinned else text


def parse_model_uri(text: str, *, digest: str | Digest | None = None) -> ModelURI:
    """Parse `text`; `digest` (from a `--digest` flag or a `digest:` field) pins it too.

    A pin in the URI and a `digest` that disagree are an error rather than a silent choice.
    """
    raw = text.strip()
    if not raw:
        raise InvalidModelURI("empty model URI")
    pinned: Digest | None = None
    match = _PIN.search(raw)
    if match:
        pinned = Digest.parse(match.group(1))
        raw = raw[: match.start()]
    if digest is not None:
        given = digest if isinstance(digest, Digest) else Digest.parse(digest)
        if pinned is not None and pinned != given:
            raise InvalidModelURI(
                f"{text!r} pins {pinned} but the digest given separately is {given}"
            )
        pinned = given
    mlflow_match = _MLFLOW.match(raw)
    if mlflow_match is not None:
        scheme = Scheme(mlflow_match.group(1))
        return ModelURI(scheme, parse_mlflow_location(text, raw), pinned=pinned)
    scheme_match = _SCHEME.match(raw)
    if scheme_match is None:
        return ModelURI(Scheme.FILE, _absolute(raw), pinned=pinned)
    name = scheme_match.group(1).lower()
    typed = {s.value: s for s in Scheme if s is not Scheme.AZURE_BLOB}
    if name not in typed:
        raise InvalidModelURI(
            f"unsupported URI scheme {name}:// in {text!r}; use "
            + ", ".join(f"{value}://" for value in typed)
            + ", https://<account>.blob.core.windows.net/<container>/<path> or a local path"
        )
    scheme = typed[name]
    rest = raw[scheme_match.end() :]
    if scheme in (Scheme.MODELS, Scheme.RUNS):
        raise InvalidModelURI(f"{text!r}: MLflow URIs have one slash: {name}:/...")
    if scheme is Scheme.FILE:
        return _parse_file(raw, pinned)
    if scheme in (Scheme.HTTP, Scheme.HTTPS):
        host = urlsplit(raw).hostname
        if not host:
            raise InvalidModelURI(f"{text!r} has no host")
        if scheme is Scheme.HTTPS and _AZURE_BLOB_HOST.match(host):
            return _parse_azure_blob(text, raw, pinned)
        return ModelURI(scheme, raw, pinned=pinned)
    if scheme is Scheme.HF:
        return _parse_hf(text, rest, pinned)
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise InvalidModelURI(f"{text!r} names no bucket")
    return ModelURI(scheme, rest.rstrip("/"), pinned=pinned)


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _parse_file(raw: str, pinned: Digest | None) -> ModelURI:
    parts = urlsplit(raw)
    if parts.netloc not in ("", "localhost"):
        raise InvalidModelURI(f"{raw!r}: file:// URIs name a local path (file:///abs/path)")
    if not parts.path:
        raise InvalidModelURI(f"{raw!r} names no path")
    return ModelURI(Scheme.FILE, _absolute(unquote(parts.path)), pinned=pinned)


def _parse_hf(text: str, rest: str, pinned: Digest | None) -> ModelURI:
    repo, _, revision = rest.partition("@")
    repo = repo.strip("/")
    if not _HF_REPO.match(repo):
        raise InvalidModelURI(f"{text!r}: expected hf://org/name[@revision]")
    if "@" in revision:
        raise InvalidModelURI(f"{text!r}: more than one @revision")
    return ModelURI(Scheme.HF, repo, revision=revision or None, pinned=pinned)


def _parse_azure_blob(text: str, raw: str, pinned: Digest | None) -> ModelURI:
    parts = urlsplit(raw)
    host = (parts.hostname or "").lower()
    match = _AZURE_BLOB_HOST.match(host)
    if match is None or not _AZURE_ACCOUNT.match(match.group("account")):
        raise InvalidModelURI(
            f"{text!r}: an Azure storage account name is 3-24 lowercase letters and digits"
        )
    if parts.query:
        # KServe takes a SAS from the query string; here it would land in the cache key,
        # the progress log and the rendered pod's annotations, readable by anyone who can
        # get pods. A Secret carries it instead.
        raise InvalidModelURI(
            f"{parts.scheme}://{parts.netloc}{parts.path}: refusing a query string (a SAS token "
            "in the URI would be logged and stored in the manifest); give the SAS as "
            "AZURE_STORAGE_SAS_TOKEN from a Secret"
        )
    if parts.port is not None or parts.username or parts.fragment:
        raise InvalidModelURI(f"{text!r}: expected https://<account>.blob.core.windows.net/...")
    path = unquote(parts.path).strip("/")
    container = path.split("/", 1)[0]
    if not container:
        raise InvalidModelURI(f"{text!r} names no container")
    return ModelURI(Scheme.AZURE_BLOB, f"{host}/{path}", pinned=pinned)
