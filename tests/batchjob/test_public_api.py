import podserve.batchjob


def test_public_surface_is_what_we_mean() -> None:
    assert podserve.batchjob.__all__ == sorted(podserve.batchjob.__all__)
    assert set(podserve.batchjob.__all__) == {
        "Checkpoint", "CheckpointError", "DecodedLine", "EncodedLine", "JobSpec",
        "JsonLinesReporter", "LineDecoder", "LoadedModel", "Outcome", "RawLine", "Reporter",
        "ResultWriter", "RichReporter", "Snapshot", "SummaryOnly", "encode_result",
        "fetch_model_dir", "iter_lines", "load_model", "local_input", "read_checkpoint",
        "reporter_for", "resume_point", "run_job", "score", "summary_text", "write_checkpoint",
    }  # fmt: skip
    for name in podserve.batchjob.__all__:
        assert getattr(podserve.batchjob, name) is not None
