"""The errors ckpttools raises.

Every error is a :class:`CkptError` and also the matching built-in exception, so
library users can catch either ``ckpttools.errors.CheckpointNotFoundError`` or plain
``FileNotFoundError``. Each carries the path, tensor or URL involved, a hint saying
what to do, and the exit code the CLI uses for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "EXIT_OK",
    "EXIT_FINDINGS",
    "EXIT_USAGE",
    "EXIT_UNMEASURED",
    "opt",
    "render_params",
    "CkptError",
    "CheckpointNotFoundError",
    "NoWeightsError",
    "CheckpointFormatError",
    "ConfigError",
    "EnvVarError",
    "PickleRefusedError",
    "UnsafePathError",
    "MappingError",
    "TokenizerError",
    "HubError",
    "OutputExistsError",
    "ServerError",
    "ImpossibleFiguresError",
]

#: the command ran and found nothing wrong
EXIT_OK = 0
#: a check ran and found problems (validate errors, verify below the bar)
EXIT_FINDINGS = 1
#: bad usage or unreadable input
EXIT_USAGE = 2
#: verify ran but measured nothing (every request failed, or no speculative figures came back)
EXIT_UNMEASURED = 3


_OPT = re.compile("\x00opt:([a-z_]+)\x00")


def opt(name: str) -> str:
    """A reference to the parameter ``name`` inside an error's message or hint.

    The library never names CLI flags: ``str(err)`` renders the reference as the Python
    keyword (``target=``), and the CLI renders it as its flag (``--target``) through
    :meth:`CkptError.render`. The marker holds NUL bytes, which no path or token can.
    """
    return f"\x00opt:{name}\x00"


def _render(text: str, flag: Callable[[str], str]) -> str:
    return _OPT.sub(lambda m: flag(m.group(1)), text)


def render_params(text: str, flag: Callable[[str], str]) -> str:
    """``text`` with each :func:`opt` reference written as ``flag(name)`` (the CLI: its flag)."""
    return _render(text, flag)


def _keyword(name: str) -> str:
    return f"{name}="


class CkptError(Exception):
    """Base class. ``str(err)`` is the one-line message; ``err.hint`` what to do.

    ``err.params`` names the function parameters the error is about (Python names);
    :meth:`render` writes message and hint with another spelling for them.
    """

    exit_code: int = EXIT_USAGE
    default_hint: str | None = None
    #: the error is a request that got no whole answer within its deadline (io/net.py sets it)
    timed_out: bool = False

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        tensor: str | None = None,
        url: str | None = None,
        hint: str | None = None,
    ) -> None:
        self._template = message
        self._hint_template = hint if hint is not None else self.default_hint
        self.message = _render(message, _keyword)
        Exception.__init__(self, self.message)
        self.path = str(path) if path is not None else None
        self.tensor = tensor
        self.url = url
        self.hint = None if self._hint_template is None else _render(self._hint_template, _keyword)
        self.params = tuple(dict.fromkeys(_OPT.findall(message + "\n" + (self._hint_template or ""))))

    def __str__(self) -> str:
        return self.message

    def about(self, prefix: str, suffix: str = "") -> CkptError:
        """The same error (class, hint, exit code) with its message between ``prefix`` and ``suffix``
        (which name no parameter): e.g. which of several runs it ended."""
        err = type(self).__new__(type(self))
        CkptError.__init__(
            err,
            prefix + self._template + suffix,
            path=self.path,
            tensor=self.tensor,
            url=self.url,
            hint=self._hint_template,
        )
        err.exit_code = self.exit_code
        return err

    def render(self, flag: Callable[[str], str]) -> tuple[str, str | None]:
        """Message and hint with each parameter written as ``flag(python_name)``."""
        hint = None if self._hint_template is None else _render(self._hint_template, flag)
        return _render(self._template, flag), hint


class CheckpointNotFoundError(CkptError, FileNotFoundError):
    """The path does not exist and is not a Hub repo id found in the cache."""

    default_hint = "check the path, or give a Hub repo id like org/name[@revision]"


class NoWeightsError(CkptError, FileNotFoundError):
    """A directory exists but holds no .safetensors weights."""

    default_hint = (
        "point at a directory with model.safetensors or model.safetensors.index.json, or at a .safetensors file"
    )


class CheckpointFormatError(CkptError, ValueError):
    """A .safetensors file or index is malformed (truncated, bad header, bad offsets)."""

    default_hint = "the file is damaged or not safetensors: download or export it again"


class ConfigError(CkptError, ValueError):
    """config.json is missing where required, or is not valid JSON."""

    default_hint = "fix config.json (it must be a JSON object)"


class EnvVarError(CkptError, ValueError):
    """An environment variable that ckpttools or huggingface_hub reads has a value it cannot use."""

    default_hint = "fix or unset the variable"

    def __init__(self, variable: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        #: the variable's name
        self.variable = variable


class PickleRefusedError(CkptError, ValueError):
    """Pickle-based weights (.bin/.pt/.pth/.ckpt) were given; ckpttools never unpickles."""

    default_hint = (
        "convert to safetensors in a trusted environment, e.g. "
        '`python -c "import torch, safetensors.torch as st; '
        "st.save_file(torch.load('pytorch_model.bin', weights_only=True), 'model.safetensors')\"`"
    )


class UnsafePathError(CkptError, ValueError):
    """An index names a shard outside the checkpoint directory."""

    default_hint = "the index.json is untrusted or damaged: shard names must stay inside the checkpoint"


class MappingError(CkptError, ValueError):
    """A vocabulary mapping (d2t/t2d/ids) is malformed."""

    default_hint = "rebuild the mapping, e.g. with `ckpt vocab build`"


class TokenizerError(CkptError, ValueError):
    """A tokenizer file is missing, unreadable, or not a Hugging Face tokenizer.json."""

    default_hint = "give the tokenizer.json that ships with the model (or the directory holding it)"


class HubError(CkptError, ConnectionError):
    """The Hugging Face Hub could not be reached or refused the request."""

    default_hint = "check the network and token, or set HF_HUB_OFFLINE=1 to use the local cache"


class OutputExistsError(CkptError, FileExistsError):
    """The output path exists and replacing it was not asked for (``force``)."""

    default_hint = f"choose another output path, or replace it with {opt('force')}"


class ServerError(CkptError, ConnectionError):
    """A serving engine could not be reached or answered badly."""

    default_hint = "check that the server is up and the URL is right"


class ImpossibleFiguresError(ServerError):
    """A server reported figures no run can produce (more verify steps than tokens, more
    accepted drafts than proposed ones, NaN...). One such request makes the whole run an
    error: its other figures cannot be trusted either."""

    #: the run stops with this error (a failed request is otherwise kept apart and the run goes on)
    fatal = True
    default_hint = "the server's counters are broken: report it to the engine, and measure on another build"
