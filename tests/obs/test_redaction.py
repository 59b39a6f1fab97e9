"""Payload-log redaction: case-insensitive, at any depth, through lists, by name, dotted
path, glob or regex; and through the real server's `--payload-log-redact` setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from podserve.config.settings import ServerSettings
from podserve.core.tensors import Datatype, InferRequest, InferResponse, Tensor
from podserve.obs.payloads import PayloadLogger
from podserve.obs.redaction import REDACTED, RedactionPatternError, Redactor
from tests.obs.test_payloads import ListSink
from tests.support.server import ServerProcess, infer_body, wait_until, write_model

PII = "123-45-6789"
# Dashed: a request id is hex, so a bare "4111" could appear in one by chance (a CI flake).
CARD = "4111-1111-1111-1111"


def _nested() -> dict[str, Any]:
    return {
        "SSN": PII,
        "customer": {"ssn": PII, "name": "Ada", "Email": "ada@example.com"},
        "household": [
            {"name": "Bob", "ssn": PII},
            {"name": "Cy", "card": {"Number": CARD, "expiry": "01/30"}},
        ],
        "bucket": 1,
    }


def test_a_bare_name_matches_at_any_depth_in_any_case() -> None:
    out = Redactor(["ssn"]).redact(_nested())
    assert out["SSN"] == REDACTED
    assert out["customer"]["ssn"] == REDACTED
    assert out["household"][0] == {"name": "Bob", "ssn": REDACTED}
    assert out["customer"]["name"] == "Ada"
    assert out["bucket"] == 1
    assert PII not in json.dumps(out)


def test_a_dotted_path_is_anchored_at_the_root_and_crosses_lists() -> None:
    redactor = Redactor(["customer.email", "household.card"])
    out = redactor.redact(_nested())
    assert out["customer"] == {"ssn": PII, "name": "Ada", "Email": REDACTED}
    assert out["household"][1]["card"] == REDACTED  # the whole subtree goes
    assert out["household"][0] == {"name": "Bob", "ssn": PII}
    # anchored: a deeper `email` is not `customer.email`
    assert redactor.redact({"x": {"customer": {"email": "e"}}}) == {
        "x": {"customer": {"email": "e"}}
    }


def test_globs_and_regexes() -> None:
    assert Redactor(["*.number"]).redact(_nested())["household"][1]["card"]["Number"] == REDACTED
    assert Redactor(["*token*"]).redact({"api_TOKEN": "t", "a": {"x_token_y": 1}}) == {
        "api_TOKEN": REDACTED,
        "a": {"x_token_y": REDACTED},
    }
    out = Redactor([r"re:(^|\.)card\.(number|cvv)$"]).redact(_nested())
    assert out["household"][1]["card"] == {"Number": REDACTED, "expiry": "01/30"}
    assert out["SSN"] == PII


def test_an_invalid_regex_is_a_clear_error() -> None:
    with pytest.raises(RedactionPatternError, match=r"re:\(unclosed"):
        Redactor(["re:(unclosed"])
    with pytest.raises(ValidationError, match="payload_log_redact"):
        ServerSettings(payload_log_redact=["re:(unclosed"])


def test_no_patterns_leave_the_value_untouched() -> None:
    value = _nested()
    assert Redactor().redact(value) is value
    assert not Redactor([" "])


def test_json_records_inside_bytes_tensors_are_redacted() -> None:
    redactor = Redactor(["ssn"])
    record = json.dumps({"customer": {"SSN": PII}, "items": [{"ssn": PII}]})
    assert json.loads(redactor.redact_json_text(record)) == {
        "customer": {"SSN": REDACTED},
        "items": [{"ssn": REDACTED}],
    }
    for untouched in ("plain text with ssn", "{not json", '{"name": "x"}', ""):
        assert redactor.redact_json_text(untouched) == untouched


def test_payload_logger_redacts_nested_parameters_tensors_and_records() -> None:
    record = json.dumps({"customer": {"ssn": PII}, "note": "ok"}).encode()
    request = InferRequest(
        "m",
        (
            Tensor("x", Datatype.FP32, np.ones((1, 2), dtype=np.float32)),
            Tensor("SSN", Datatype.BYTES, np.array([PII.encode()], dtype=object)),
            Tensor("record", Datatype.BYTES, np.array([record, b"free text"], dtype=object)),
        ),
        parameters=_nested(),
    )
    response = InferResponse("m", (Tensor("Api_Key", Datatype.BYTES, np.array([b"k"])),))
    sink = ListSink()
    logger = PayloadLogger(sinks=[sink], sample_rate=1.0, redact=["ssn", "api_key"])
    logger.offer(request, response, request_id="r", endpoint="v2")
    logger.close()
    (event,) = sink.events
    data = event["data"]
    assert PII not in json.dumps(event)
    assert data["parameters"]["customer"] == {
        "ssn": REDACTED,
        "name": "Ada",
        "Email": "ada@example.com",
    }
    assert data["parameters"]["household"][0]["ssn"] == REDACTED
    assert data["inputs"][0]["data"] == [1.0, 1.0]
    assert data["inputs"][1]["data"] == REDACTED
    first, second = data["inputs"][2]["data"]
    assert json.loads(first) == {"customer": {"ssn": REDACTED}, "note": "ok"}
    assert second == "free text"
    assert data["outputs"][0]["data"] == REDACTED


def test_the_server_redacts_nested_pii_configured_on_the_command_line(tmp_path: Path) -> None:
    write_model(tmp_path, "m")
    log_file = tmp_path / "payloads.jsonl"
    with ServerProcess(
        "--model-repository",
        str(tmp_path),
        "--payload-log-file",
        str(log_file),
        "--payload-log-sample-rate",
        "1",
        "--payload-log-redact",
        "ssn,customer.email,re:card\\.number$",
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        body = {**infer_body([1, 2, 3]), "parameters": _nested()}
        with server.client() as client:
            assert client.post("/v2/models/m/infer", json=body).status_code == 200
        wait_until(
            lambda: server.metric("podserve_payload_records_total", {"result": "written"}) >= 1,
            what="the payload record written",
        )
    text = log_file.read_text()
    for secret in (PII, "ada@example.com", CARD):
        assert secret not in text
    parameters = json.loads(text.splitlines()[0])["data"]["parameters"]
    assert parameters["SSN"] == REDACTED
    assert parameters["customer"] == {"ssn": REDACTED, "name": "Ada", "Email": REDACTED}
    assert parameters["household"][1]["card"] == {"Number": REDACTED, "expiry": "01/30"}
