"""Engine conventions, each written once: config dtype names, aux-layer-id conventions,
SGLang's default captures, and where a target's config is read from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ckpttools.errors import ConfigError
from ckpttools.io.checkpoint import Checkpoint, load_config, open_checkpoint
from ckpttools.io.refs import REPO_REF, split_ref

__all__ = ["CONFIG_DTYPE", "ST_DTYPE", "AUX_ID_CONVENTION", "sglang_default_aux_ids", "load_target_config"]

#: safetensors dtype -> the name config.json's torch_dtype uses for it
CONFIG_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
#: config.json torch_dtype -> safetensors dtype, for the dtypes a drafter is served in
ST_DTYPE = {"bfloat16": "BF16", "float16": "F16"}

#: how each drafter layout states aux layer ids. "output" = the output of layer id (SGLang
#: adds 1 to make it a capture point); "input" = the input of layer id (vLLM uses the id
#: as the capture point as is). Read off SGLang 0.5.17 llama.py set_eagle3_layers_to_capture
#: and vLLM's llama forward (aux_hidden_state_layers).
AUX_ID_CONVENTION = {
    "sglang": "output",
    "eagle": "output",
    "modelopt": "output",
    "mla": "output",
    "eagle3-unknown": "output",
    "vllm": "input",
}


def sglang_default_aux_ids(num_target_layers: int) -> list[int]:
    """SGLang's default captures, as eagle_aux_hidden_state_layer_ids.

    SGLang captures the input of layers [2, L//2, L-3] by default and, for ids given in
    the config, the input of layer id+1 (the output of layer id). The same captures
    written as ids are therefore [1, L//2 - 1, L - 4].
    """
    L = num_target_layers
    return [1, L // 2 - 1, L - 4]


def load_target_config(target: str | Path | Checkpoint) -> tuple[dict[str, Any], str]:
    """A target's config from a config.json, a directory holding one, or a checkpoint/repo id."""
    if isinstance(target, Checkpoint):
        if target.config is None:
            raise ConfigError(f"{target.source}: the target has no config.json", path=target.source)
        return target.config, str(target.source)
    p = Path(target)
    if p.is_file() and p.suffix == ".json":
        return load_config(p), str(p)
    if p.is_dir() and (p / "config.json").is_file():
        return load_config(p / "config.json"), str(p)
    if not os.path.lexists(p) and REPO_REF.match(str(target)):  # a Hub repo: its config.json, nothing more
        from ckpttools.io.hub import HubRepo

        repo = HubRepo.resolve(*split_ref(str(target)))
        if "config.json" not in repo.files:
            raise ConfigError(f"{target}: the target repo has no config.json", path=str(target))
        return load_config(repo.download("config.json")), f"{target} (commit {repo.commit})"
    with open_checkpoint(target) as ck:
        if ck.config is None:
            raise ConfigError(f"{target}: the target has no config.json", path=str(target))
        return ck.config, str(target)
