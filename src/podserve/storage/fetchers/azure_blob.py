"""Azure Blob sources through azure-storage-blob and azure-identity (the `[azure]` extra).

URIs are the https forms KServe's storage initializer accepts (`_AZURE_BLOB_RE` in
kserve/kserve python/storage/kserve_storage/kserve_storage.py; it has no `az://`):
`https://<account>.blob.core.windows.net/<container>/<path>` (and the DNS-zone endpoints
`<account>.z<N>.blob.storage.azure.net`). `<path>` names one blob when it exists, else
every blob under `<path>/` as a directory; names ending in `/` and the directory blobs of a
hierarchical-namespace account (metadata `hdi_isfolder=true`, learn.microsoft.com/azure/
storage/blobs/data-lake-storage-namespace) are skipped. A whole container needs no path.

Each blob is read from where an earlier attempt stopped (`x-ms-range`) with `If-Match:
<ETag from the listing>`: a blob replaced between attempts has a new ETag, so its partial
is read again from byte 0 (base.PartialFile), and one replaced during the read answers 412
ConditionNotMet (learn.microsoft.com/rest/api/storageservices/specifying-conditional-
headers-for-blob-service-operations) instead of a tail of other bytes.

Credentials, the first that is set:
1. AZURE_STORAGE_CONNECTION_STRING: account, key or SAS, and endpoint together (its
   AccountName must be the URI's account);
2. AZURE_STORAGE_SAS_TOKEN (the Azure CLI's name for it);
3. AZURE_STORAGE_KEY (the Azure CLI's) or AZURE_STORAGE_ACCESS_KEY (KServe's): the
   account key;
4. AZURE_CLIENT_ID or AZURE_FEDERATED_TOKEN_FILE: azure-identity's DefaultAzureCredential.
   On AKS the workload identity webhook injects AZURE_CLIENT_ID, AZURE_TENANT_ID,
   AZURE_FEDERATED_TOKEN_FILE and AZURE_AUTHORITY_HOST into pods labelled
   `azure.workload.identity/use: "true"` whose ServiceAccount carries
   `azure.workload.identity/client-id` (azure-workload-identity docs, "Mutating Admission
   Webhook"); its WorkloadIdentityCredential reads exactly those. A service principal's
   AZURE_CLIENT_SECRET works too (EnvironmentCredential). KServe makes the same choice:
   DefaultAzureCredential only when a client id is set (`_get_azure_storage_token`);
5. none: anonymous, for a container with public read access.
The endpoint is the connection string's when one is set (its BlobEndpoint, or the account
and EndpointSuffix), else `SourceOptions.azure_blob_endpoint` (Azurite, a private endpoint),
else the URI's host.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podserve.storage.errors import (
    FetchNetworkError,
    MissingExtra,
    ModelNotFoundAtSource,
    SourceAccessDenied,
    StorageError,
)
from podserve.storage.fetchers.base import StagingArea
from podserve.storage.fetchers.object_store import (
    Listed,
    ObjectSink,
    StoredObject,
    copy_object,
    select_objects,
)
from podserve.storage.progress import Progress
from podserve.storage.uri import ModelURI

if TYPE_CHECKING:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import BlobServiceClient, ContainerClient

_WHAT = "Azure Blob URIs (https://<account>.blob.core.windows.net/...)"
_ANONYMOUS = "no credentials (anonymous)"
_STORAGE_SCOPE = "https://storage.azure.com/.default"  # what the storage client asks for


@dataclass(frozen=True, slots=True)
class _Location:
    host: str
    account: str
    container: str
    path: str

    @classmethod
    def of(cls, uri: ModelURI) -> _Location:
        host, _, rest = uri.location.partition("/")
        container, _, path = rest.partition("/")
        return cls(host, host.split(".", 1)[0], container, path)


class AzureBlobFetcher:
    __slots__ = ("_endpoint_url", "_timeout_s")

    def __init__(self, *, endpoint_url: str | None = None, timeout_s: float = 60.0) -> None:
        self._endpoint_url = endpoint_url
        self._timeout_s = timeout_s

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        try:
            from azure.core.exceptions import (
                ClientAuthenticationError,
                HttpResponseError,
                ServiceRequestError,
                ServiceResponseError,
            )
        except ImportError as exc:
            raise MissingExtra(
                scheme=uri.scheme.value, extra="azure", module="azure-storage-blob", what=_WHAT
            ) from exc
        where = str(uri)
        loc = _Location.of(uri)
        how = "the credentials found"
        try:
            service, how = self._service(loc, os.environ, where)
            with service:
                container = service.get_container_client(loc.container)
                objects = select_objects(
                    loc.path,
                    head=lambda path: _head(container, path),
                    list_under=lambda prefix: _list_under(container, prefix),
                    missing=lambda prefix: ModelNotFoundAtSource(
                        f"{where}: no such blob, and no blobs under {loc.container}/{prefix}"
                    ),
                )
                staging.prune({o.rel for o in objects})
                for obj in objects:
                    copy_object(
                        obj,
                        staging,
                        progress,
                        where=f"{where}: {obj.name}",
                        read=lambda o, offset, sink: _read(container, o, offset, sink),
                    )
        except ClientAuthenticationError as exc:
            if exc.status_code is None:  # raised by the credential, before any request
                raise SourceAccessDenied(
                    f"{where}: {how} could not get a token: {_first_line(exc)}"
                ) from exc
            raise _http_error(where, how, exc) from exc
        except HttpResponseError as exc:
            raise _http_error(where, how, exc) from exc
        except (ServiceRequestError, ServiceResponseError, OSError) as exc:
            raise FetchNetworkError(
                f"network error fetching {where}: {_first_line(exc)}; a retry resumes the download"
            ) from exc
        except ValueError as exc:  # the SDKs' word for a bad setting, e.g. AZURE_AUTHORITY_HOST
            raise StorageError(f"{where}: {how}: {_first_line(exc)}") from exc

    def _service(
        self, loc: _Location, env: Mapping[str, str], where: str
    ) -> tuple[BlobServiceClient, str]:
        try:
            from azure.storage.blob import BlobServiceClient, ExponentialRetry
        except ImportError as exc:
            raise MissingExtra(
                scheme="azure-blob", extra="azure", module="azure-storage-blob", what=_WHAT
            ) from exc
        options: dict[str, Any] = {
            "connection_timeout": self._timeout_s,
            "read_timeout": self._timeout_s,
            # The SDK's default waits about 18, 24 and 42 s between tries (initial_backoff
            # + increment_base ** try: azure/storage/blob/_shared/policies.py); a failed
            # fetch is restarted by its init container anyway, and resumes: 3, 5 and 9 s.
            "retry_policy": ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=3),
        }
        connection = env.get("AZURE_STORAGE_CONNECTION_STRING")
        if connection:
            how = "AZURE_STORAGE_CONNECTION_STRING"
            try:
                service = BlobServiceClient.from_connection_string(connection, **options)
            except ValueError as exc:
                raise StorageError(f"{how} is malformed: {exc}") from exc
            if service.account_name != loc.account:
                raise SourceAccessDenied(
                    f"{how} is for storage account {service.account_name!r}, but the URI "
                    f"names {loc.account!r}"
                )
            return service, how
        url = self._endpoint_url or f"https://{loc.host}"
        credential: Any = None
        how = _ANONYMOUS
        if env.get("AZURE_STORAGE_SAS_TOKEN"):
            credential, how = env["AZURE_STORAGE_SAS_TOKEN"].lstrip("?"), "AZURE_STORAGE_SAS_TOKEN"
        elif env.get("AZURE_STORAGE_KEY") or env.get("AZURE_STORAGE_ACCESS_KEY"):
            key = env.get("AZURE_STORAGE_KEY") or env["AZURE_STORAGE_ACCESS_KEY"]
            credential = {"account_name": loc.account, "account_key": key}
            how = "the account key (AZURE_STORAGE_KEY)"
        elif env.get("AZURE_CLIENT_ID") or env.get("AZURE_FEDERATED_TOKEN_FILE"):
            credential, how = _token_credential(env)
            _first_token(credential, how, where)
        return BlobServiceClient(url, credential=credential, **options), how


def _head(container: ContainerClient, path: str) -> Listed | None:
    from azure.core.exceptions import ResourceNotFoundError

    try:
        props = container.get_blob_client(path).get_blob_properties()
    except ResourceNotFoundError:
        return None  # a prefix, or nothing: the listing says which
    if _is_folder(props.metadata):
        return None
    return Listed(path, int(props.size), _quoted(props.etag))


def _list_under(container: ContainerClient, prefix: str) -> Iterable[Listed]:
    for blob in container.list_blobs(name_starts_with=prefix or None, include=["metadata"]):
        if not _is_folder(blob.metadata):
            yield Listed(blob.name, int(blob.size), _quoted(blob.etag))


def _read(container: ContainerClient, obj: StoredObject, offset: int, sink: ObjectSink) -> None:
    from azure.core import MatchConditions

    stream = container.get_blob_client(obj.name).download_blob(
        offset=offset,
        etag=obj.validator,
        match_condition=MatchConditions.IfNotModified,
        max_concurrency=1,
    )
    for chunk in stream.chunks():
        sink.write(chunk)


def _first_token(credential: Any, how: str, where: str) -> None:
    """Get the token before any storage request. The storage client's retry policy retries
    every AzureError, a refused token exchange too (azure/storage/blob/_shared/policies.py,
    StorageRetryPolicy.send): an identity with no federated credential would wait out all
    its retries before saying so. Once here, the credential caches the token."""
    from azure.core.exceptions import ClientAuthenticationError

    try:
        credential.get_token(_STORAGE_SCOPE)
    except ClientAuthenticationError as exc:
        raise SourceAccessDenied(
            f"{where}: {how} could not get a token for Azure Storage: {_first_line(exc)}"
        ) from exc


def _token_credential(env: Mapping[str, str]) -> tuple[Any, str]:
    try:
        from azure.identity import DefaultAzureCredential, WorkloadIdentityCredential
    except ImportError as exc:
        raise MissingExtra(
            scheme="azure-blob", extra="azure", module="azure-identity", what=_WHAT
        ) from exc
    if env.get("AZURE_FEDERATED_TOKEN_FILE"):
        # What DefaultAzureCredential picks on an AKS pod with workload identity; when it
        # fails, the chain would go on to the node's managed identity (IMDS) and the
        # developer tools, adding a minute of waiting and hiding the real error.
        return WorkloadIdentityCredential(), "workload identity (AZURE_FEDERATED_TOKEN_FILE)"
    # A service principal (AZURE_CLIENT_SECRET / _CERTIFICATE_PATH) or a user-assigned
    # managed identity named by AZURE_CLIENT_ID; no developer tools inside a pod.
    credential = DefaultAzureCredential(
        exclude_workload_identity_credential=True,
        exclude_cli_credential=True,
        exclude_powershell_credential=True,
        exclude_developer_cli_credential=True,
        exclude_visual_studio_code_credential=True,
        exclude_shared_token_cache_credential=True,
        exclude_interactive_browser_credential=True,
    )
    return credential, "DefaultAzureCredential (AZURE_CLIENT_ID)"


def _quoted(etag: str) -> str:
    """One spelling of an ETag: Get Blob Properties sends it quoted (an HTTP header), List
    Blobs bare (an XML element), and a resume compares the two."""
    text = str(etag)
    return text if text.startswith('"') else f'"{text}"'


def _is_folder(metadata: Mapping[str, str] | None) -> bool:
    return (metadata or {}).get("hdi_isfolder", "").lower() == "true"


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _http_error(where: str, how: str, exc: HttpResponseError) -> StorageError:
    status = exc.status_code or 0
    code = getattr(exc, "error_code", None) or ""  # set by the storage SDK, not typed
    code = getattr(code, "value", code)  # a StorageErrorCode, or the service's own string
    detail = f"{where}: {status} {code}".rstrip()
    if status == 404:
        hint = (
            " (an anonymous request gets this from a private container too: give the fetch "
            "credentials)"
            if how == _ANONYMOUS
            else ""
        )
        return ModelNotFoundAtSource(detail + hint)
    # An account that disallows anonymous access (the default for new accounts) answers
    # anonymous requests 409 PublicAccessNotPermitted (learn.microsoft.com/azure/storage/
    # blobs/anonymous-read-access-prevent).
    if (status in (401, 403) and how == _ANONYMOUS) or code == "PublicAccessNotPermitted":
        return SourceAccessDenied(
            f"{detail}: the container does not allow anonymous reads; give the fetch "
            "credentials (a Secret with AZURE_STORAGE_CONNECTION_STRING or "
            "AZURE_STORAGE_SAS_TOKEN, or workload identity)"
        )
    if status in (401, 403):
        return SourceAccessDenied(
            f"{detail} with {how}: {_first_line(exc)}; the identity needs the Storage Blob "
            "Data Reader role (or a SAS with read and list permissions)"
        )
    if status == 412:
        return FetchNetworkError(
            f"{detail}: the blob changed during the download; a retry starts it again"
        )
    if status >= 500 or status in (408, 429):
        return FetchNetworkError(f"{detail}; retrying may work")
    return StorageError(f"{detail}: {_first_line(exc)}")
