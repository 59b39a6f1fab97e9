"""The progress file of a batch job, and how a restarted job resumes from it.

A checkpoint records how far the input was consumed (line number and byte offset) and how
many bytes of output hold those lines' results. It is only ever written after that output
was fsynced, and atomically (temp file, fsync, rename, fsync the directory), so at any
moment — kill -9 included — the checkpoint on disk describes output that is on disk:

    resume: truncate the output to `output_size_bytes` (dropping a half-written tail),
            seek the input to `input_offset_bytes`, continue numbering after `lines_done`

so no line is scored twice and none is written twice. Before the output file is first
created an empty checkpoint is written; an output file without a checkpoint therefore
never came from this job, and is refused rather than overwritten (unless restarting).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podserve.core.errors import PodserveError

CHECKPOINT_VERSION = 1


class CheckpointError(PodserveError):
    """The checkpoint cannot be used: unreadable, or for another input, model or output."""


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(CHECKPOINT_VERSION, description="Format version of this file.")
    input: str = Field(description="The input as given on the command line (path or URI).")
    input_size_bytes: int = Field(ge=0, description="Input size when the job first started.")
    model: str = Field(description="Name of the model scoring the input.")
    lines_done: int = Field(0, ge=0, description="Input lines consumed (blank ones included).")
    input_offset_bytes: int = Field(0, ge=0, description="Where the next input line starts.")
    output_size_bytes: int = Field(0, ge=0, description="Committed, fsynced output bytes.")
    rows_done: int = Field(0, ge=0, description="Rows scored or failed so far, all runs.")
    records_done: int = Field(0, ge=0, description="Output lines written so far, all runs.")
    errors: int = Field(0, ge=0, description="Output lines that carry an error, all runs.")
    complete: bool = Field(False, description="The whole input has been consumed.")


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    try:
        return Checkpoint.model_validate_json(text)
    except ValidationError as exc:
        raise CheckpointError(
            f"checkpoint {path} is not a valid podserve batch checkpoint ({exc.error_count()} "
            "problem(s)); pass --restart to start over"
        ) from exc


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint atomically: a reader sees the old one or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = checkpoint.model_dump_json().encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    # The rename itself is durable only once the directory entry is.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def resume_point(
    *,
    checkpoint_path: Path,
    output_path: Path,
    input_name: str,
    input_size_bytes: int,
    model: str,
    restart: bool,
) -> Checkpoint:
    """Where this run starts. Writes the initial checkpoint when there is none (or when
    restarting) before the caller creates the output."""
    fresh = Checkpoint(input=input_name, input_size_bytes=input_size_bytes, model=model)
    existing = None if restart else read_checkpoint(checkpoint_path)
    if existing is None:
        if not restart and output_path.exists() and output_path.stat().st_size > 0:
            raise CheckpointError(
                f"output {output_path} exists but has no checkpoint at {checkpoint_path}; "
                "pass --restart to overwrite it"
            )
        checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint(checkpoint_path, fresh)
        return fresh
    _check_same_job(existing, fresh, checkpoint_path)
    output_size = output_path.stat().st_size if output_path.exists() else 0
    if output_size < existing.output_size_bytes:
        raise CheckpointError(
            f"output {output_path} has {output_size} bytes but checkpoint {checkpoint_path} "
            f"recorded {existing.output_size_bytes} committed; the output was changed or "
            "lost. Pass --restart to start over"
        )
    if existing.input_offset_bytes > input_size_bytes:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} is {existing.input_offset_bytes} bytes into an "
            f"input of {input_size_bytes} bytes; pass --restart to start over"
        )
    return existing


def _check_same_job(existing: Checkpoint, fresh: Checkpoint, path: Path) -> None:
    if existing.version != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {existing.version}; this podserve writes "
            f"{CHECKPOINT_VERSION}. Pass --restart to start over"
        )
    for field in ("input", "input_size_bytes", "model"):
        before, now = getattr(existing, field), getattr(fresh, field)
        if before != now:
            raise CheckpointError(
                f"checkpoint {path} belongs to another job ({field} was {before!r}, now "
                f"{now!r}); pass --restart to start over, or use another --output"
            )
