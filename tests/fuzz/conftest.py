"""The fuzz suite's data plane: real models behind both real edges, shared by the module
(loading costs seconds; each Hypothesis example costs milliseconds)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.planes import Edges, edges


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edges]:
    async with edges(tmp_path_factory.mktemp("fuzz"), examples=("iris", "minilm")) as pair:
        yield pair
