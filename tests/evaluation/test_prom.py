"""Metrics: the textfile parses back with prometheus_client's parser, and a push is one PUT
to the suite's group on a (stand-in) Pushgateway."""

from __future__ import annotations

from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podserve.evaluation.prom import push, write_textfile
from tests.evaluation.conftest import Recorder
from tests.evaluation.support import result

RUN = result(
    ("a", ("iris",), True), ("b", ("iris",), False), ("c", ("mlp",), True), suite="team.golden"
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


EXPECTED = {
    ("podserve_eval_pass_ratio", (("suite", "team.golden"), ("tag", "all"))): 2 / 3,
    ("podserve_eval_pass_ratio", (("suite", "team.golden"), ("tag", "iris"))): 0.5,
    ("podserve_eval_pass_ratio", (("suite", "team.golden"), ("tag", "mlp"))): 1.0,
    ("podserve_eval_cases_total", (("result", "passed"), ("suite", "team.golden"))): 2.0,
    ("podserve_eval_cases_total", (("result", "failed"), ("suite", "team.golden"))): 1.0,
    ("podserve_eval_last_run_timestamp_seconds", (("suite", "team.golden"),)): 1_700_000_000.0,
}


def test_textfile_parses_back(tmp_path: Path) -> None:
    path = tmp_path / "collector" / "podserve_eval.prom"
    write_textfile(RUN, path)
    assert samples(path.read_text()) == EXPECTED
    # Written by rename: only the final file remains in the collector's directory.
    assert [p.name for p in path.parent.iterdir()] == ["podserve_eval.prom"]


def test_push_puts_the_suite_group(gateway: tuple[str, list[tuple[str, str, str]]]) -> None:
    url, requests = gateway
    push(RUN, url, timeout_s=5)
    assert len(requests) == 1
    method, path, body = requests[0]
    assert (method, path) == ("PUT", "/metrics/job/podserve_eval/suite/team.golden")
    assert samples(body) == EXPECTED


def test_push_to_a_dead_gateway_raises_oserror() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    port = server.server_address[1]
    server.server_close()  # a port nobody listens on
    with pytest.raises(OSError, match="refused"):
        push(RUN, f"http://127.0.0.1:{port}", timeout_s=5)
