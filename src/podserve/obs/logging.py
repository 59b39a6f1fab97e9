"""Structured logs: JSON lines by default, a human format for a terminal.

Records are handed to a background thread (QueueHandler → QueueListener), so a slow
stderr never blocks the event loop. Access-log lines are sampled by the caller.
Prompts and tensors are never logged: callers pass ids, names, codes and timings only.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import os
import queue
import sys
import time
from typing import Any

import orjson

# Standard LogRecord attributes, plus uvicorn's terminal colouring, are not "extra" fields.
_RESERVED = set(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _RESERVED)
        base = (
            f"{time.strftime('%H:%M:%S', time.localtime(record.created))} "
            f"{record.levelname:<7} {record.name}: {record.getMessage()}"
        )
        text = f"{base}  {extras}" if extras else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


_listener: logging.handlers.QueueListener | None = None

# Libraries that draw tqdm bars on stderr while they download or load: huggingface_hub
# (and transformers, which asks it) read HF_HUB_DISABLE_PROGRESS_BARS when imported
# (huggingface_hub/constants.py); tqdm >= 4.66 takes TQDM_<ARG> environment variables as
# its defaults (tqdm/utils.py `envwrap`), so TQDM_DISABLE turns off the bars of callers
# that do not pass `disable` themselves.
_BAR_SWITCHES = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}


def quiet_third_party_progress() -> None:
    """No library progress bars on stderr: they are not JSON and end up between the JSON
    log lines. Call it before those libraries are imported; a value the operator set
    is left alone."""
    for name, value in _BAR_SWITCHES.items():
        os.environ.setdefault(name, value)
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        hub.disable_progress_bars()  # imported already: its constant was read


def configure_logging(log_format: str = "json", level: str = "INFO") -> None:
    """Route every podserve (and uvicorn) log record through one background writer; for
    JSON logs, or when stderr is no terminal, also silence third-party progress bars."""
    global _listener
    if log_format == "json" or not sys.stderr.isatty():
        quiet_third_party_progress()
    if _listener is not None:
        _listener.stop()
    stream_handler = logging.StreamHandler(sys.stderr)
    stream_handler.setFormatter(JsonFormatter() if log_format == "json" else ConsoleFormatter())
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    _listener = logging.handlers.QueueListener(records, stream_handler, respect_handler_level=False)
    _listener.start()
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # uvicorn's access log duplicates ours, without request ids or models.
    logging.getLogger("uvicorn.access").disabled = True
    atexit.register(flush_logging)


def flush_logging() -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None
