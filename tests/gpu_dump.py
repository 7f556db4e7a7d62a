"""A custom weight loader for the real SGLang (``--custom-weight-loader tests.gpu_dump.dump_params``),
called through ``/update_weights_from_tensor`` with no tensors: it writes the draft model's own
parameters (names, shapes, dtypes, sums, whether all ones) to $CKPT_DUMP, so a test can hold the
engine's real state after ``load_weights`` against ckpttools' load plan. SGLang calls a custom
loader as ``fn(model, named_tensors)``, the draft model and then the target
(sglang/srt/model_executor/model_runner_components/weight_updater.py:319-353); the target is left alone.
"""

from __future__ import annotations

import json
import os
from typing import Any


def dump_params(model: Any, named_tensors: list) -> None:
    from tests.param_state import param_state

    if "Eagle3" not in type(model).__name__:
        return
    with open(os.environ["CKPT_DUMP"], "w") as f:
        json.dump(param_state(model), f, indent=1)
