"""The bundled tiny language model (examples/models/tiny-lm) loads with stock transformers
and writes English, not noise. Needs the optional torch + transformers extra."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"
COMMON_WORDS = {
    "the", "of", "a", "an", "to", "is", "and", "in", "for", "be", "if", "or", "not", "it",
    "this", "that", "as", "by", "with", "on", "are", "value", "list", "string", "function",
    "object", "file", "name", "default", "return", "returns", "same", "current", "process",
}  # fmt: skip


@pytest.fixture(scope="module")
def model_and_tokenizer() -> tuple[Any, Any]:
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    tokenizer = transformers.AutoTokenizer.from_pretrained(MODEL_DIR)
    model.eval()
    return model, tokenizer


def test_greedy_generation_is_english(model_and_tokenizer: tuple[Any, Any]) -> None:
    model, tokenizer = model_and_tokenizer
    inputs = tokenizer("The function returns", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=20, min_new_tokens=20, do_sample=False)
    new = out[0][inputs["input_ids"].shape[1] :]
    assert len(new) == 20
    text = tokenizer.decode(new, skip_special_tokens=True)
    letters = sum(c.isascii() and (c.isalpha() or c.isspace()) for c in text)
    assert letters / len(text) >= 0.8, text
    words = re.findall(r"[a-z]+", text.lower())
    assert len([w for w in words if w in COMMON_WORDS]) >= 4, text
    assert len(set(words) & COMMON_WORDS) >= 3, text


def test_chat_template_renders_and_ends_with_eos(
    model_and_tokenizer: tuple[Any, Any],
) -> None:
    _, tokenizer = model_and_tokenizer
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What does json.dumps do?"},
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt == ("<|system|>\nBe brief.\n<|user|>\nWhat does json.dumps do?\n<|assistant|>\n")
    reply = [*messages, {"role": "assistant", "content": "It encodes JSON."}]
    rendered = tokenizer.apply_chat_template(reply, tokenize=False)
    assert rendered.endswith("<|assistant|>\nIt encodes JSON.<|endoftext|>\n")
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|user|>") != tokenizer.unk_token_id
