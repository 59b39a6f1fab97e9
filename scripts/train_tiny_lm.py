"""Train the bundled tiny language model in examples/models/tiny-lm (a few minutes on 2 cores).

The corpus is English that every Python install carries: the docstrings of the standard
library (modules, classes, functions and methods, gathered with `inspect` in sorted order)
plus the help topics of `pydoc_data` (the language reference in prose). A few thousand
chat-formatted pairs ("What does json.dumps do?" -> its summary line) teach the chat
template. A byte-level BPE tokenizer is trained with `tokenizers`, then a 4-layer Llama
with `transformers`, seeded and on a fixed number of threads, so a rerun on the same
Python, torch and thread count reproduces the same weights.

    .venv/bin/python scripts/train_tiny_lm.py            # writes examples/models/tiny-lm
    .venv/bin/python scripts/train_tiny_lm.py --steps 20 --out /tmp/tiny-lm   # a smoke run

Needs torch, transformers, tokenizers and safetensors (not the core install).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import io
import json
import math
import random
import re
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

EOS = "<|endoftext|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SYSTEM = "<|system|>"
SPECIAL_TOKENS = [EOS, USER, ASSISTANT, SYSTEM]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}<|user|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}<|assistant|>\n{{ message['content'] }}"
    "<|endoftext|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Modules whose import has side effects (a browser, a window, printing) or that drag in a GUI.
_SKIP_MODULES = {
    "antigravity",
    "this",
    "idlelib",
    "tkinter",
    "turtle",
    "turtledemo",
    "__main__",
    "__phello__",
    "_tkinter",
}
_PROSE = re.compile(r"^[\x20-\x7e]*$")  # printable ASCII only


def _prose_paragraphs(doc: str) -> Iterator[str]:
    """Paragraphs of a docstring that read as English prose (no code, tables or doctests)."""
    for para in re.split(r"\n\s*\n", doc):
        lines = [line.strip() for line in para.strip().splitlines()]
        if not lines or any(line.startswith((">>>", "...", "$", "#")) for line in lines):
            continue
        text = " ".join(lines)
        words = text.split()
        if len(words) < 6 or not _PROSE.match(text):
            continue
        letters = sum(c.isalpha() or c == " " for c in text)
        if letters / len(text) > 0.9:
            yield text


def _module_docs(module: ModuleType) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) for a module, its public classes, functions and methods."""
    doc = inspect.getdoc(module)
    if doc:
        yield module.__name__, doc
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
            doc = inspect.getdoc(obj)
            if doc:
                yield f"{module.__name__}.{name}", doc
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_") or not callable(member):
                    continue
                doc = inspect.getdoc(member)
                if doc:
                    yield f"{module.__name__}.{name}.{attr}", doc


def gather_corpus() -> tuple[list[str], list[str]]:
    """Documents (prose) and chat pairs, in a deterministic order."""
    docs: list[str] = []
    chats: list[str] = []
    seen: set[str] = set()
    for mod_name in sorted(sys.stdlib_module_names - _SKIP_MODULES):
        try:
            with warnings.catch_warnings(), redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                with redirect_stderr(io.StringIO()):
                    module = importlib.import_module(mod_name)
        except Exception:  # a module that fails to import simply adds nothing
            continue
        for qualname, doc in _module_docs(module):
            paras = [p for p in _prose_paragraphs(doc) if p not in seen]
            seen.update(paras)
            if paras:
                docs.append("\n\n".join(paras))
                summary = paras[0].split(". ")[0].rstrip(".") + "."
                chats.append(f"{USER}\nWhat does {qualname} do?\n{ASSISTANT}\n{summary}{EOS}\n")
    from pydoc_data.topics import topics  # the language reference as plain text

    for key in sorted(topics):
        paras = [p for p in _prose_paragraphs(topics[key]) if p not in seen]
        seen.update(paras)
        if paras:
            docs.append("\n\n".join(paras))
    return docs, chats


def train_tokenizer(texts: list[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=EOS, model_max_length=512
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples/models/tiny-lm"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=3072)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    started = time.monotonic()

    docs, chats = gather_corpus()
    texts = docs + chats
    rng.shuffle(texts)
    tokenizer = train_tokenizer(texts, args.vocab)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if not text.endswith(f"{EOS}\n"):
            ids.append(eos_id)
    data = torch.tensor(ids, dtype=torch.long)
    corpus_s = time.monotonic() - started
    print(f"corpus: {len(docs)} docs, {len(chats)} chats, {len(ids)} tokens ({corpus_s:.1f}s)")

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=640,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    gen = torch.Generator().manual_seed(args.seed)
    model.train()
    losses: list[float] = []
    train_started = time.monotonic()
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.seq_len - 1, (args.batch,), generator=gen)
        batch = torch.stack([data[s : s + args.seq_len] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == args.steps - 1:
            elapsed = time.monotonic() - train_started
            print(f"step {step:4d} loss {loss.item():.3f} ({elapsed:.0f}s)", flush=True)
    train_s = time.monotonic() - train_started
    final_loss = sum(losses[-20:]) / len(losses[-20:])

    model.eval()
    model.generation_config.max_length = None
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out, save_jinja_files=False)
    # transformers 5 writes its own class name; the 4.x name loads in both major versions.
    tok_config_path = args.out / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_config_path.write_text(json.dumps(tok_config, indent=2) + "\n")
    prompt = "The function returns"
    enc = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=40, do_sample=False)
    sample = tokenizer.decode(out[0], skip_special_tokens=True)
    summary = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "threads": args.threads,
        "seed": args.seed,
        "steps": args.steps,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "corpus_tokens": len(ids),
        "parameters": n_params,
        "train_s": round(train_s, 1),
        "final_loss": round(final_loss, 3),
        "prompt": prompt,
        "greedy_sample": sample,
    }
    (args.out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
