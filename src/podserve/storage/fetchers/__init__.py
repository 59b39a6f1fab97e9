"""One fetcher per URI scheme, behind the `Fetcher` protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from podserve.storage.errors import InvalidModelURI
from podserve.storage.fetchers.base import Fetcher, SourceOptions, StagingArea
from podserve.storage.uri import ModelURI, Scheme

__all__ = [
    "Fetcher",
    "Resolver",
    "SourceOptions",
    "StagingArea",
    "default_fetchers",
    "fetcher_for",
    "resolve_source",
]


def default_fetchers(options: SourceOptions) -> Mapping[Scheme, Fetcher]:
    # Imported here so that the scheme modules stay out of a process that never uses them.
    from podserve.storage.fetchers.azure_blob import AzureBlobFetcher
    from podserve.storage.fetchers.gcs import GcsFetcher
    from podserve.storage.fetchers.hf import HfFetcher
    from podserve.storage.fetchers.http import HttpFetcher
    from podserve.storage.fetchers.local import LocalFetcher
    from podserve.storage.fetchers.mlflow import MlflowFetcher
    from podserve.storage.fetchers.s3 import S3Fetcher

    http = HttpFetcher(timeout_s=options.timeout_s)
    return {
        Scheme.FILE: LocalFetcher(),
        Scheme.HTTP: http,
        Scheme.HTTPS: http,
        Scheme.S3: S3Fetcher(endpoint_url=options.s3_endpoint_url, timeout_s=options.timeout_s),
        Scheme.GS: GcsFetcher(
            endpoint_url=options.gcs_endpoint_url,
            anonymous=options.gcs_anonymous,
            timeout_s=options.timeout_s,
        ),
        Scheme.AZURE_BLOB: AzureBlobFetcher(
            endpoint_url=options.azure_blob_endpoint, timeout_s=options.timeout_s
        ),
        Scheme.HF: HfFetcher(options),
        Scheme.MODELS: MlflowFetcher(options),
        Scheme.RUNS: MlflowFetcher(options),
    }


@runtime_checkable
class Resolver(Protocol):
    """A fetcher whose URIs can name a moving target (a registry alias) and that pins one
    to what it names now, before the cache is keyed."""

    def resolve(self, uri: ModelURI) -> ModelURI: ...


def resolve_source(fetchers: Mapping[Scheme, Fetcher], uri: ModelURI) -> ModelURI:
    fetcher = fetchers.get(uri.scheme)
    return fetcher.resolve(uri) if isinstance(fetcher, Resolver) else uri


def fetcher_for(fetchers: Mapping[Scheme, Fetcher], scheme: Scheme) -> Fetcher:
    fetcher = fetchers.get(scheme)
    if fetcher is None:
        raise InvalidModelURI(f"no fetcher for {scheme.value}:// URIs")
    return fetcher
