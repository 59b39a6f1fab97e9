"""One fetcher per URI scheme, behind the `Fetcher` protocol."""

from __future__ import annotations

from collections.abc import Mapping

from podserve.storage.errors import InvalidModelURI
from podserve.storage.fetchers.base import Fetcher, SourceOptions, StagingArea
from podserve.storage.uri import Scheme

__all__ = ["Fetcher", "SourceOptions", "StagingArea", "default_fetchers", "fetcher_for"]


def default_fetchers(options: SourceOptions) -> Mapping[Scheme, Fetcher]:
    # Imported here so that the scheme modules stay out of a process that never uses them.
    from podserve.storage.fetchers.hf import HfFetcher
    from podserve.storage.fetchers.http import HttpFetcher
    from podserve.storage.fetchers.local import LocalFetcher
    from podserve.storage.fetchers.s3 import S3Fetcher

    http = HttpFetcher(timeout_s=options.timeout_s)
    return {
        Scheme.FILE: LocalFetcher(),
        Scheme.HTTP: http,
        Scheme.HTTPS: http,
        Scheme.S3: S3Fetcher(endpoint_url=options.s3_endpoint_url, timeout_s=options.timeout_s),
        Scheme.HF: HfFetcher(options),
    }


def fetcher_for(fetchers: Mapping[Scheme, Fetcher], scheme: Scheme) -> Fetcher:
    fetcher = fetchers.get(scheme)
    if fetcher is None:
        if scheme is Scheme.GS:
            raise InvalidModelURI(
                "gs:// is not fetched directly; use s3://bucket/path with "
                "--s3-endpoint-url https://storage.googleapis.com and HMAC keys "
                "(Cloud Storage's S3-compatible API)"
            )
        raise InvalidModelURI(f"no fetcher for {scheme.value}:// URIs")
    return fetcher
