"""The batch job loop: read a chunk → score it → write its lines → commit → checkpoint.

    resume_point ─▶ ResultWriter(truncate to committed) ─▶ input.seek(committed offset)
    loop:  lines up to `batch_size` rows ─▶ decode ─▶ score ─▶ encode ─▶ write
           ─▶ fsync output ─▶ atomically replace the checkpoint ─▶ report

The checkpoint moves only after the chunk's output is durable, so a kill at any point
loses at most the chunk in flight, which the next run scores again from the same place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from podserve.batchjob.checkpoint import resume_point, write_checkpoint
from podserve.batchjob.progress import Reporter, Snapshot
from podserve.batchjob.reader import DecodedLine, LineDecoder, RawLine, iter_lines
from podserve.batchjob.scoring import Outcome, score
from podserve.batchjob.writer import ResultWriter, encode_result
from podserve.core.clock import MONOTONIC, Clock
from podserve.runtimes.base import ModelAPI


@dataclass(frozen=True, slots=True)
class JobSpec:
    input_path: Path  # the local file to read
    input_name: str  # as the user gave it (path or URI): the job's identity in the checkpoint
    output_path: Path
    checkpoint_path: Path
    batch_size: int  # rows per predict call; a line with more rows goes alone
    restart: bool = False


@dataclass(frozen=True, slots=True)
class _Chunk:
    lines: list[DecodedLine]
    last_number: int
    end_offset_bytes: int


class _Counters:
    __slots__ = ("errors", "lines", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self.lines = 0
        self.errors = 0


def run_job(
    spec: JobSpec,
    *,
    model: ModelAPI,
    model_name: str,
    reporter: Reporter,
    clock: Clock = MONOTONIC,
) -> Snapshot:
    """Score the input from where the last run committed to its end; the final snapshot."""
    if spec.batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {spec.batch_size}")
    input_size = spec.input_path.stat().st_size
    checkpoint = resume_point(
        checkpoint_path=spec.checkpoint_path,
        output_path=spec.output_path,
        input_name=spec.input_name,
        input_size_bytes=input_size,
        model=model_name,
        restart=spec.restart,
    )
    decoder = LineDecoder(model_name, model.inputs)
    started_s = clock.now_s()
    run = _Counters()

    def snapshot() -> Snapshot:
        return Snapshot(
            rows=run.rows,
            lines=run.lines,
            errors=run.errors,
            seconds=clock.now_s() - started_s,
            total_rows=checkpoint.rows_done,
            total_errors=checkpoint.errors,
            input_done_bytes=checkpoint.input_offset_bytes,
            input_size_bytes=input_size,
        )

    writer = ResultWriter(spec.output_path, checkpoint.output_size_bytes)
    try:
        with spec.input_path.open("rb") as stream:
            reporter.started(snapshot())
            raw = iter_lines(
                stream,
                start_line=checkpoint.lines_done,
                start_offset_bytes=checkpoint.input_offset_bytes,
            )
            for chunk in _chunks(raw, decoder, spec.batch_size):
                rows, errors = _score_and_write(chunk.lines, model, writer)
                committed = writer.commit()
                checkpoint = checkpoint.model_copy(
                    update={
                        "lines_done": chunk.last_number,
                        "input_offset_bytes": chunk.end_offset_bytes,
                        "output_size_bytes": committed,
                        "rows_done": checkpoint.rows_done + rows,
                        "records_done": checkpoint.records_done + len(chunk.lines),
                        "errors": checkpoint.errors + errors,
                    }
                )
                write_checkpoint(spec.checkpoint_path, checkpoint)
                run.rows += rows
                run.lines += len(chunk.lines)
                run.errors += errors
                reporter.advanced(snapshot())
        # Blank lines after the last record are consumed too, so a finished job's
        # checkpoint sits at the end of the input.
        checkpoint = checkpoint.model_copy(
            update={"complete": True, "input_offset_bytes": input_size}
        )
        write_checkpoint(spec.checkpoint_path, checkpoint)
    finally:
        writer.close()
    final = snapshot()
    reporter.finished(final)
    return final


def _chunks(raw: Iterator[RawLine], decoder: LineDecoder, batch_size: int) -> Iterator[_Chunk]:
    """Decoded lines grouped until they hold `batch_size` rows. A line that failed to
    decode counts as one row, so a file of bad lines still moves in bounded chunks."""
    lines: list[DecodedLine] = []
    rows = 0
    last: RawLine | None = None
    for line in raw:
        decoded = decoder.decode(line)
        lines.append(decoded)
        rows += max(decoded.rows, 1)
        last = line
        if rows >= batch_size:
            yield _Chunk(lines, line.number, line.end_offset_bytes)
            lines, rows = [], 0
    if lines and last is not None:
        yield _Chunk(lines, last.number, last.end_offset_bytes)


def _score_and_write(
    lines: list[DecodedLine], model: ModelAPI, writer: ResultWriter
) -> tuple[int, int]:
    """Write one output line per input line, in order; returns (rows, error lines)."""
    pending = [(line.number, line.request) for line in lines if line.request is not None]
    results = score(model, [request for _, request in pending]) if pending else []
    outcomes: dict[int, Outcome] = {
        number: outcome for (number, _), outcome in zip(pending, results, strict=True)
    }
    rows = errors = 0
    for line in lines:
        encoded = encode_result(line, outcomes.get(line.number))
        writer.write(encoded.data)
        rows += line.rows
        errors += encoded.is_error
    return rows, errors
