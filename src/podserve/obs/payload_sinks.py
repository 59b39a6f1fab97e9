"""Where payload records go: a JSONL file with size-based rotation, or an HTTP endpoint
that receives CloudEvents (batched mode, `application/cloudevents-batch+json`). Both run
only on the payload logger's writer thread."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson


class JsonlFileSink:
    """One CloudEvent per line; when the file passes `max_bytes` it is renamed to `.1`
    (older ones shift up to `.backups`) and a new file starts."""

    def __init__(self, path: Path, *, max_bytes: int = 100 * 1024 * 1024, backups: int = 3) -> None:
        self._path = path
        self._max_bytes = max_bytes
        self._backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab")

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        self._file.write(b"".join(orjson.dumps(e) + b"\n" for e in events))
        self._file.flush()
        if self._file.tell() >= self._max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        for index in range(self._backups - 1, 0, -1):
            older = self._path.with_name(f"{self._path.name}.{index}")
            if older.exists():
                os.replace(older, self._path.with_name(f"{self._path.name}.{index + 1}"))
        if self._backups > 0:
            os.replace(self._path, self._path.with_name(f"{self._path.name}.1"))
        else:
            self._path.unlink()
        self._file = self._path.open("ab")

    def close(self) -> None:
        self._file.close()


class HttpCloudEventsSink:
    """POSTs each batch as CloudEvents batched content mode. A timeout bounds how long a
    slow receiver can hold the writer thread (never the request path)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self._url = url
        self._timeout_s = timeout_s

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        request = urllib.request.Request(
            self._url,
            data=orjson.dumps(list(events)),
            headers={"content-type": "application/cloudevents-batch+json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
            if response.status >= 300:
                raise OSError(f"payload sink {self._url} answered {response.status}")

    def close(self) -> None:
        pass
