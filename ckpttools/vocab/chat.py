"""Chat templates as Hugging Face tokenizers ship them, rendered as transformers renders them.

The template comes from ``chat_template.jinja`` beside the tokenizer, else from
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates of
which ``default`` is used). Rendering follows transformers' ``apply_chat_template``: a
sandboxed Jinja2 environment with ``trim_blocks`` and ``lstrip_blocks``, ``messages``,
``add_generation_prompt=True``, the special tokens by name and ``raise_exception``; the
text is then tokenized without adding special tokens (the template places them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpttools.errors import TokenizerError

__all__ = ["load_chat_template", "chat_encoder"]


def _token(v: Any) -> str | None:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _template_source(d: Path) -> tuple[str, dict[str, Any]]:
    """The template text and tokenizer_config.json's content (empty when absent)."""
    from ckpttools.io.fsutil import read_regular_bytes

    cfg: dict[str, Any] = {}
    cfg_path = d / "tokenizer_config.json"
    if cfg_path.is_file():
        try:
            got = json.loads(read_regular_bytes(cfg_path).decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TokenizerError(f"{cfg_path}: not UTF-8 JSON", path=cfg_path) from None
        cfg = got if isinstance(got, dict) else {}
    jinja = d / "chat_template.jinja"
    if jinja.is_file():
        return read_regular_bytes(jinja).decode("utf-8", errors="replace"), cfg
    t = cfg.get("chat_template")
    if isinstance(t, list):
        t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
    if not isinstance(t, str):
        raise TokenizerError(
            f"{d}: no chat template (neither chat_template.jinja nor tokenizer_config.json's chat_template)",
            path=d,
            hint='give prompts as {"prompt": ...} text instead, or a tokenizer folder that has its chat template',
        )
    return t, cfg


def load_chat_template(path: str | Path) -> Callable[[list[dict[str, str]]], str]:
    """A function that renders a list of chat messages with the tokenizer's own template."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    d = Path(path)
    d = d.parent if d.is_file() else d
    source, cfg = _template_source(d)

    def raise_exception(message: str) -> None:
        raise TokenizerError(f"{d}: the chat template refused the messages: {message}", path=d)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        template = env.from_string(source)
    except TemplateError as e:
        raise TokenizerError(f"{d}: the chat template does not parse ({e})", path=d) from None
    special = {k: _token(cfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}

    def render(messages: list[dict[str, str]]) -> str:
        try:
            return template.render(messages=messages, add_generation_prompt=True, **special)
        except TemplateError as e:
            raise TokenizerError(f"{d}: the chat template failed on the messages ({e})", path=d) from None

    return render


def chat_encoder(path: str | Path) -> Callable[[str], list[int]]:
    """Token ids of a rendered chat, as the engines' tokenizer gives them: transformers'
    AutoTokenizer when it is installed (SGLang and vLLM tokenize with it), else the
    tokenizers library on tokenizer.json (which can differ next to special tokens, e.g. a
    "▁" after ``</s>`` in Llama-2 SentencePiece vocabularies). No special tokens are added:
    the template places them, as in ``apply_chat_template``."""
    d = Path(path)
    d = d.parent if d.is_file() else d
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(d))
        return lambda text: list(tok.encode(text, add_special_tokens=False))
    except ImportError:
        from ckpttools.vocab.tokens import load_hf_tokenizer

        fast = load_hf_tokenizer(d)
        return lambda text: list(fast.encode(text, add_special_tokens=False).ids)
