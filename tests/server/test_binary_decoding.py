"""An OIP infer body whose binary part is big is decoded off the pod's event loop, its
JSON header however small (server/routes_v2.py): binary BYTES tensors are split element
by element, and a 16 MB body of empty elements held the loop 5 s when only the header's
size decided where the decode ran.

The pod's app is served over real HTTP on 127.0.0.1 in this test's event loop
(tests/support/planes.py `loopback`), and the route's decode is held at a gate
(tests/support/gate.py): while it is held, `/healthz` is answered through the server's
sockets. Had the decode run on the loop, nothing could answer until the gate gave up.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from podserve.httpedge.decoding import INLINE_BYTES
from podserve.server import routes_v2
from tests.support.gate import Gate, probed_while_held
from tests.support.planes import Loopback, loopback

pytestmark = pytest.mark.asyncio(loop_scope="module")

DECODING_THREAD = "podserve-body-decode_0"
DECODE = "decode_infer_request"  # the route's decode, as routes_v2 imports it


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pod(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Loopback]:
    async with loopback(tmp_path_factory.mktemp("binary"), ("simple_string",)) as served:
        yield served


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    state = Gate()
    decode: Callable[..., Any] = getattr(routes_v2, DECODE)

    def gated(*args: Any, **kwargs: Any) -> Any:
        state.pass_through()
        return decode(*args, **kwargs)

    monkeypatch.setattr(routes_v2, DECODE, gated)
    yield state
    state.opened.set()


def binary_bytes_body(element: bytes) -> tuple[bytes, dict[str, str]]:
    """simple_string's two [1, 16] BYTES inputs, every element `element`, as binary."""
    data = (len(element).to_bytes(4, "little") + element) * 16
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": [1, 16],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(data)},
                }
                for name in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    headers = {"inference-header-content-length": str(len(header))}
    return header + data + data, headers


async def test_a_big_binary_part_is_decoded_off_the_loop(pod: Loopback, gate: Gate) -> None:
    # A header of a few hundred bytes; 32 elements of 4 KiB after it.
    body, headers = binary_bytes_body(b"0" * 4095 + b"1")
    assert int(headers["inference-header-content-length"]) < INLINE_BYTES < len(body)
    health, response = await probed_while_held(
        gate,
        pod.http.post("/v2/models/simple_string/infer", content=body, headers=headers),
        lambda: pod.http.get("/healthz"),
    )
    assert health.status_code == 200
    assert response.status_code == 200, response.text[:300]
    assert response.json()["outputs"][0]["data"] == ["2"] * 16
    assert gate.opened_in_time == [True]
    assert gate.threads == [DECODING_THREAD]
