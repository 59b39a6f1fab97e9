"""The sampling fields every text-generation request schema shares (OpenAI's and
Triton's generate extension), validated the same way everywhere."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # an extension vLLM also accepts
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False  # vLLM's extension, used by benchmarks

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
