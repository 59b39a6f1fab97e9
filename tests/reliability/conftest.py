"""One in-process data plane over real models for the module's tests (loading the
embedding and generation models costs seconds, so it is shared)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.planes import Edges, edges


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edges]:
    async with edges(tmp_path_factory.mktemp("reliability")) as pair:
        yield pair
