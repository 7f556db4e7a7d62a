"""Conventions, each written once: config dtype names, and where a target's config is read from
(the engines' aux-id rules: engines/aux_rules.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ckpttools.errors import CheckpointNotFoundError, ConfigError, HubError
from ckpttools.io.checkpoint import Checkpoint, hub_config, load_config, local_typo, open_checkpoint
from ckpttools.io.refs import REPO_REF, split_ref

__all__ = ["CONFIG_DTYPE", "ST_DTYPE", "TargetOnce", "load_target_config"]

#: safetensors dtype -> the name config.json's torch_dtype uses for it
CONFIG_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
#: config.json torch_dtype -> safetensors dtype, for the dtypes a drafter is served in
ST_DTYPE = {"bfloat16": "BF16", "float16": "F16"}


class TargetOnce:
    """A target whose config is read once, where it is first needed, and given as read after
    (:func:`load_target_config` reads it so): one run's checks of several drafters against it."""

    def __init__(self, target: str | Path | Checkpoint) -> None:
        self.target = target
        self._read: tuple[dict[str, Any], str] | None = None

    def read(self) -> tuple[dict[str, Any], str]:
        """(config, the name to report), read on the first call (a call that raised is tried again)."""
        if self._read is None:
            self._read = load_target_config(self.target)
        return self._read

    def __str__(self) -> str:
        return str(self.target)


def load_target_config(target: str | Path | Checkpoint | TargetOnce) -> tuple[dict[str, Any], str]:
    """A target's config from a config.json, a directory holding one, or a checkpoint/repo id
    (a :class:`TargetOnce`: as it read it)."""
    if isinstance(target, TargetOnce):
        return target.read()
    if isinstance(target, Checkpoint):
        if target.config is None:
            raise _no_config(target.source)
        return target.config, str(target.source)
    p = Path(target)
    if p.is_file() and p.suffix == ".json":
        return load_config(p), str(p)
    if p.is_dir() and (p / "config.json").is_file():
        return load_config(p / "config.json"), str(p)
    if not os.path.lexists(p) and REPO_REF.match(str(target)):  # a Hub repo: its config.json, nothing more
        from ckpttools.io.hub import HubRepo

        try:
            repo = HubRepo.resolve(*split_ref(str(target)))
        except (HubError, CheckpointNotFoundError) as e:
            raise local_typo(str(target), e) or e
        if "config.json" not in repo.files:
            raise ConfigError(f"{target}: the target repo has no config.json", path=str(target))
        return hub_config(repo), f"{target} (commit {repo.commit})"
    with open_checkpoint(target) as ck:
        if ck.config is None:
            raise _no_config(str(target))
        return ck.config, str(target)


def _no_config(source: str) -> ConfigError:
    """A target read without a config.json: a weights file given alone, or a directory without one."""
    if Path(source).is_file():
        return ConfigError(
            f"{source}: a weights file alone has no config.json: the target's sizes are read from it",
            path=source,
            hint="give the target's directory (config.json beside the weights)",
        )
    return ConfigError(
        f"{source}: the target has no config.json",
        path=source,
        hint="give a target whose directory holds its config.json (the model's config, as transformers writes it)",
    )
