"""Offline scoring (`podserve batch`): JSONL in, the same runtimes with batching, JSONL
out, with a checkpoint so a restarted Kubernetes Job resumes without redoing or
duplicating a line. See docs/batch.md."""

from podserve.batchjob.checkpoint import (
    Checkpoint,
    CheckpointError,
    read_checkpoint,
    resume_point,
    write_checkpoint,
)
from podserve.batchjob.progress import (
    JsonLinesReporter,
    Reporter,
    RichReporter,
    Snapshot,
    SummaryOnly,
    reporter_for,
    summary_text,
)
from podserve.batchjob.reader import DecodedLine, LineDecoder, RawLine, iter_lines
from podserve.batchjob.runner import JobSpec, run_job
from podserve.batchjob.scoring import Outcome, score
from podserve.batchjob.sources import LoadedModel, fetch_model_dir, load_model, local_input
from podserve.batchjob.writer import EncodedLine, ResultWriter, encode_result

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "DecodedLine",
    "EncodedLine",
    "JobSpec",
    "JsonLinesReporter",
    "LineDecoder",
    "LoadedModel",
    "Outcome",
    "RawLine",
    "Reporter",
    "ResultWriter",
    "RichReporter",
    "Snapshot",
    "SummaryOnly",
    "encode_result",
    "fetch_model_dir",
    "iter_lines",
    "load_model",
    "local_input",
    "read_checkpoint",
    "reporter_for",
    "resume_point",
    "run_job",
    "score",
    "summary_text",
    "write_checkpoint",
]
