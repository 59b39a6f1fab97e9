import podserve.storage


def test_public_surface_is_what_we_mean() -> None:
    assert podserve.storage.__all__ == sorted(podserve.storage.__all__)
    assert set(podserve.storage.__all__) == {
        "CacheCorrupted", "Digest", "DigestMismatch", "FetchNetworkError", "FetchResult",
        "Fetcher", "InvalidModelURI", "Manifest", "MissingExtra", "ModelCache",
        "ModelNotFoundAtSource", "ModelURI", "Phase", "Progress", "Scheme",
        "SourceAccessDenied", "SourceOptions", "StorageError", "artifacts_manifest",
        "compute_digest",
        "compute_manifest", "ensure_local", "fetch_model", "parse_model_uri", "progress_for",
        "release_local",
    }  # fmt: skip
    for name in podserve.storage.__all__:
        assert getattr(podserve.storage, name) is not None
