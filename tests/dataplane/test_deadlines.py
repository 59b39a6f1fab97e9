"""The data plane's deadline rule, pure (issue 13, bugs 1 and 2): Triton's `timeout` is
microseconds; the header is milliseconds; the model's then the server's default apply
when the request names none; a transport deadline always applies too."""

from __future__ import annotations

import math

import pytest

from podserve.core.errors import InvalidInput
from podserve.dataplane.deadlines import deadline_s

NOW = 1000.0


def deadline(
    parameters: dict[str, object] | None = None,
    *,
    timeout_ms: str | None = None,
    client_timeout_s: float | None = None,
    default_timeout_s: float | None = None,
) -> float | None:
    return deadline_s(
        now_s=NOW,
        parameters=parameters or {},
        timeout_ms=timeout_ms,
        client_timeout_s=client_timeout_s,
        default_timeout_s=default_timeout_s,
    )


def test_triton_timeout_is_microseconds() -> None:
    # tritonclient's `infer(..., timeout=500000)`: half a second, not 5.8 days
    assert deadline({"timeout": 500_000}) == pytest.approx(NOW + 0.5)
    assert deadline({"timeout": "250000"}) == pytest.approx(NOW + 0.25)
    assert deadline({"timeout": 1.5}) == pytest.approx(NOW + 1.5e-6)


def test_the_header_is_milliseconds_and_the_parameter_wins() -> None:
    assert deadline(timeout_ms="1500") == pytest.approx(NOW + 1.5)
    assert deadline({"timeout": 100_000}, timeout_ms="5000") == pytest.approx(NOW + 0.1)


def test_defaults_apply_only_without_a_request_timeout() -> None:
    assert deadline() is None
    assert deadline(default_timeout_s=2.0) == pytest.approx(NOW + 2.0)
    assert deadline({"timeout": 3_000_000}, default_timeout_s=2.0) == pytest.approx(NOW + 3.0)


def test_a_transport_deadline_always_applies() -> None:
    assert deadline(client_timeout_s=4.0) == pytest.approx(NOW + 4.0)
    # the earlier of the two, whichever it is
    assert deadline({"timeout": 1_000_000}, client_timeout_s=4.0) == pytest.approx(NOW + 1.0)
    assert deadline({"timeout": 9_000_000}, client_timeout_s=4.0) == pytest.approx(NOW + 4.0)
    assert deadline(client_timeout_s=4.0, default_timeout_s=0.5) == pytest.approx(NOW + 0.5)
    # a deadline the transport already passed is now, never in the past's future
    assert deadline(client_timeout_s=-1.0) == NOW


@pytest.mark.parametrize("bad", [0, -5, True, "soon", math.nan, math.inf, [1]])
def test_nonsense_timeouts_are_400s_naming_the_unit(bad: object) -> None:
    with pytest.raises(InvalidInput, match=r"parameters\.timeout \(microseconds"):
        deadline({"timeout": bad})


def test_a_bad_header_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidInput, match="x-request-timeout-ms header"):
        deadline(timeout_ms="later")
