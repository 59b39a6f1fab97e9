"""Shared type aliases."""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

Array = npt.NDArray[Any]
ArrayMap = dict[str, Array]
