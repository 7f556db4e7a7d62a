"""Chat templates as Hugging Face tokenizers ship them, rendered as transformers renders them.

The template comes from ``chat_template.jinja`` beside the tokenizer, else from
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates of
which ``default`` is used). Rendering follows transformers' ``apply_chat_template``: a
sandboxed Jinja2 environment with ``trim_blocks`` and ``lstrip_blocks``, ``messages``,
``add_generation_prompt=True``, the special tokens by name and ``raise_exception``; the
text is then tokenized without adding special tokens (the template places them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ckpttools.errors import TokenizerError

__all__ = ["load_chat_template", "chat_encoder"]


#: the special tokens a template is given by name, from tokenizer_config.json
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def _token(v: Any) -> str | None:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _check_config(cfg: Any, p: Path) -> dict[str, Any]:
    """tokenizer_config.json's fields that are read, type-checked: ``chat_template`` a string or a
    list of ``{"name": str, "template": str}``; each special token a string, ``{"content": str}``
    or null."""

    from ckpttools.io.inputs import json_kind

    def bad(what: str) -> TokenizerError:
        return TokenizerError(f"{p}: {what}", path=p, hint="fix tokenizer_config.json, or give the model's own")

    if not isinstance(cfg, dict):
        raise bad(f"{json_kind(cfg)} at the top, not an object")
    t = cfg.get("chat_template")
    if t is not None and not isinstance(t, (str, list)):
        raise bad(f"chat_template is {json_kind(t)}, not a string or a list of named templates")
    for n, x in enumerate(t if isinstance(t, list) else []):
        if not (isinstance(x, dict) and isinstance(x.get("name"), str) and isinstance(x.get("template"), str)):
            raise bad(f'chat_template[{n}] is {json_kind(x)}, not {{"name": string, "template": string}}')
    for k in _SPECIAL:
        v = cfg.get(k)
        if v is not None and _token(v) is None:
            raise bad(f'{k} is {json_kind(v)}, not a string or {{"content": string}}')
    return cfg


def _template_source(d: Path) -> tuple[str, dict[str, Any]]:
    """The template text and tokenizer_config.json's content (empty when absent)."""
    from ckpttools.io.fsutil import read_regular_bytes
    from ckpttools.io.inputs import read_json

    cfg: dict[str, Any] = {}
    cfg_path = d / "tokenizer_config.json"
    if cfg_path.is_file():
        cfg = _check_config(read_json(cfg_path, "tokenizer_config", error=TokenizerError), cfg_path)
    jinja = d / "chat_template.jinja"
    if jinja.is_file():
        return read_regular_bytes(jinja).decode("utf-8", errors="replace"), cfg
    t = cfg.get("chat_template")
    if isinstance(t, list):
        t = next((x["template"] for x in t if x["name"] == "default"), None)
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
    except (TemplateError, RecursionError, MemoryError, ValueError, TypeError) as e:
        raise TokenizerError(f"{d}: the chat template does not parse ({e.__class__.__name__}: {e})", path=d) from None
    special = {k: _token(cfg.get(k)) for k in _SPECIAL}

    def render(messages: list[dict[str, str]]) -> str:
        try:
            with _deadline(_RENDER_SECONDS):
                text = _bounded_render(template, messages=messages, add_generation_prompt=True, **special)
        except TokenizerError:
            raise
        except _RenderTimeout:
            raise TokenizerError(
                f"{d}: the chat template ran for more than {_RENDER_SECONDS} s on one conversation", path=d
            ) from None
        except Exception as e:  # a template is code: any failure of it is the template's
            raise TokenizerError(
                f"{d}: the chat template failed on the messages ({e.__class__.__name__}: {str(e)[:200]})", path=d
            ) from None
        if text is None:
            raise TokenizerError(f"{d}: the chat template rendered more than {_RENDER_MAX_CHARS} characters", path=d)
        return text

    return render


#: a real template renders one conversation in well under a millisecond (TinyLlama's, 21 messages of 400 words:
#: 0.18 ms here); 2 s is four orders of magnitude past that, and what an endless template costs before it is stopped
_RENDER_SECONDS = 2
_RENDER_MAX_CHARS = 16 << 20


def _bounded_render(template: Any, **kw: Any) -> str | None:
    """The template's text, streamed (None past ``_RENDER_MAX_CHARS``: never held whole)."""
    parts, n = [], 0
    for chunk in template.generate(**kw):
        n += len(chunk)
        if n > _RENDER_MAX_CHARS:
            return None
        parts.append(chunk)
    return "".join(parts)


class _RenderTimeout(Exception):
    pass


@contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Stop a template that runs too long (SIGALRM, in the main thread; elsewhere no limit)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(*_: Any) -> None:
        raise _RenderTimeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def chat_encoder(path: str | Path) -> Callable[[str], list[int]]:
    """Token ids of a rendered chat, as the engines' tokenizer gives them: transformers'
    AutoTokenizer when it is installed (SGLang and vLLM tokenize with it), else the
    tokenizers library on tokenizer.json (which can differ next to special tokens, e.g. a
    "▁" after ``</s>`` in Llama-2 SentencePiece vocabularies). No special tokens are added:
    the template places them, as in ``apply_chat_template``."""
    from ckpttools.io.env import check_hub_env

    d = Path(path)
    d = d.parent if d.is_file() else d
    check_hub_env()  # transformers imports huggingface_hub, which reads its variables at import
    try:
        from transformers import AutoTokenizer
    except ImportError:
        from ckpttools.vocab.tokens import load_hf_tokenizer

        fast = load_hf_tokenizer(d)
        return lambda text: list(fast.encode(text, add_special_tokens=False).ids)
    try:
        tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except Exception as e:  # transformers raises many kinds for a bad folder
        raise TokenizerError(
            f"{d}: transformers cannot load this tokenizer ({e.__class__.__name__}: {str(e)[:200]})", path=d
        ) from None
    return lambda text: list(tok.encode(text, add_special_tokens=False))
