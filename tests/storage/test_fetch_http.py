from __future__ import annotations

import socket
from pathlib import Path

import pytest

from podserve.storage import (
    DigestMismatch,
    FetchNetworkError,
    ModelNotFoundAtSource,
    fetch_model,
    parse_model_uri,
)
from podserve.storage.cache import ModelCache, key_for
from podserve.storage.fetchers import StagingArea
from tests.storage.support import ServerState, expected_digest

DATA = bytes(range(256)) * 4096  # 1 MiB
DIGEST = expected_digest({"model.onnx": DATA})


def _release(result: object) -> None:
    lease = getattr(result, "lease", None)
    if lease is not None:
        lease.release()


def test_fetch_pinned_file_then_hit_without_a_request(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    state.put("/m/model.onnx", DATA)
    a = fetch_model(f"{base}/m/model.onnx@{DIGEST}", cache_dir=tmp_path)
    b = fetch_model(f"{base}/m/model.onnx", digest=DIGEST, cache_dir=tmp_path)
    assert a.path == b.path
    assert b.from_cache
    assert (a.path / "model.onnx").read_bytes() == DATA
    assert len(state.gets("/m/model.onnx")) == 1
    _release(a)
    _release(b)


def test_digest_mismatch_publishes_nothing(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    state.put("/m/model.onnx", DATA[:-1] + b"X")
    with pytest.raises(DigestMismatch) as info:
        fetch_model(f"{base}/m/model.onnx", digest=DIGEST, cache_dir=tmp_path)
    assert info.value.expected == DIGEST
    assert info.value.actual == expected_digest({"model.onnx": DATA[:-1] + b"X"})
    assert [p for p in (tmp_path / "entries").glob("*") if p.is_dir()] == []
    assert list((tmp_path / "tmp").iterdir()) == []  # a retry starts clean


def test_not_found_and_unreachable(http_server: tuple[str, ServerState], tmp_path: Path) -> None:
    base, _ = http_server
    with pytest.raises(ModelNotFoundAtSource, match="404"):
        fetch_model(f"{base}/nope.bin", cache_dir=tmp_path)
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(FetchNetworkError):
        fetch_model(f"http://127.0.0.1:{port}/m.bin", cache_dir=tmp_path)


def _leave_partial(tmp_path: Path, url: str, data: bytes, validator: str | None) -> None:
    """What an interrupted earlier fetch leaves in the cache's tmp area."""
    cache = ModelCache(tmp_path)
    staging = StagingArea(cache.prepare_staging(key_for(parse_model_uri(url, digest=DIGEST))))
    staging.create()
    with staging.partial("model.onnx").open(offset=0, validator=validator) as f:
        f.write(data)


def test_resume_sends_range_with_if_range(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    url = f"{base}/model.onnx"
    state.put("/model.onnx", DATA)
    _leave_partial(tmp_path, url, DATA[:1000], state.etags["/model.onnx"])
    r = fetch_model(url, digest=DIGEST, cache_dir=tmp_path)
    [hit] = state.gets("/model.onnx")
    assert (hit.range, hit.if_range, hit.status) == ("bytes=1000-", state.etags["/model.onnx"], 206)
    assert (r.path / "model.onnx").read_bytes() == DATA
    _release(r)


def test_resume_of_a_changed_file_restarts_from_zero(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    url = f"{base}/model.onnx"
    state.put("/model.onnx", DATA)
    # Kept bytes of an older version: If-Range fails, the server sends the whole file.
    _leave_partial(tmp_path, url, b"OLD" * 100, '"older-version"')
    r = fetch_model(url, digest=DIGEST, cache_dir=tmp_path)
    [hit] = state.gets("/model.onnx")
    assert hit.status == 200
    assert (r.path / "model.onnx").read_bytes() == DATA
    _release(r)


def test_partial_longer_than_the_file_restarts(
    http_server: tuple[str, ServerState], tmp_path: Path
) -> None:
    base, state = http_server
    url = f"{base}/model.onnx"
    state.put("/model.onnx", DATA)
    _leave_partial(tmp_path, url, DATA + b"extra", state.etags["/model.onnx"])
    r = fetch_model(url, digest=DIGEST, cache_dir=tmp_path)
    assert [h.status for h in state.gets("/model.onnx")] == [416, 200]
    assert (r.path / "model.onnx").read_bytes() == DATA
    _release(r)
