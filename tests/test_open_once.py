"""Issue 32, item 3: one check before a launch, each drafter opened and its config.json parsed once.

The pre-launch path of ``ckpt verify --launch --target T D1 D2 D3`` (``measure(request)``): the launch
check (``check_launch``: every drafter validated, its quantization checks and load plan included), the
shared server's launch (``compare.shared_launch``: the config guard, the swap route, CKPT_SWAP_SPEC),
and the swap helpers the shared server's turns call (``server_spec``, ``swappable``), with three real
tiny drafters on disk and no server. The real ``open_checkpoint``, ``load_config`` and ``read_json``
run, each wrapped in a counter wherever a module of ckpttools holds it: instrumentation, not a mock.
The target's config.json is read once too (``formats.conventions.TargetOnce``). The path-taking forms
the helpers had still give what they gave.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ckpttools.io.checkpoint as checkpoint_mod
import ckpttools.io.inputs as inputs_mod
from ckpttools.demo.tiny import build_known_pair
from ckpttools.engines.launch import free_port
from ckpttools.engines.opened import OpenedDrafter, open_once
from ckpttools.engines.swap import prepare_launch, server_spec, swappable
from ckpttools.measuring.compare import shared_launch
from ckpttools.measuring.launch_check import check_launch
from ckpttools.measuring.request import MeasureRequest
from ckpttools.ops.validate import validate


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    w = tmp_path_factory.mktemp("open-once")
    t, d1 = build_known_pair(w / "a", target="repeat", drafter="id")
    _, d2 = build_known_pair(w / "b", target="repeat", drafter="swap")  # the same config and tensors: swappable
    _, d3 = build_known_pair(w / "c", target="repeat", drafter="id", norm_output=True)  # another config
    return {"target": str(t), "drafters": [str(d1), str(d2), str(d3)]}


class Counts:
    """How often each real reader ran, by (reader, the real path it was given)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def of(self, reader: str, path: str | Path) -> int:
        return self.calls[(reader, os.path.realpath(path))]

    def opened(self, drafter: str) -> int:
        return self.of("open_checkpoint", drafter)

    def parsed(self, drafter: str) -> int:
        """config.json parsed: read_json is the one parser every reader of it goes through (load_config too)."""
        return self.of("read_json", Path(drafter) / "config.json")


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    c = Counts()

    def counting(label: str, real: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(real)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            c.calls[(label, os.path.realpath(str(args[0])))] += 1
            return real(*args, **kwargs)

        return wrapper

    for mod, name in ((checkpoint_mod, "open_checkpoint"), (checkpoint_mod, "load_config"), (inputs_mod, "read_json")):
        real = getattr(mod, name)
        wrapped = counting(name, real)
        for m in list(sys.modules.values()):  # every module that bound the name at import
            if getattr(m, "__name__", "").startswith("ckpttools") and getattr(m, name, None) is real:
                monkeypatch.setattr(m, name, wrapped)
    return c


def _request(three: dict[str, Any]) -> MeasureRequest:
    return MeasureRequest.from_options(
        three["drafters"], engine="sglang==0.5.17", launch=True, target=three["target"], port=free_port()
    )


def test_the_pre_launch_check_opens_and_parses_each_drafter_once(three: dict[str, Any], counts: Counts) -> None:
    req = _request(three)
    assert req.launch is not None
    checked = check_launch(req.launch, req.drafters, req.pinned)
    spec = shared_launch(req, checked)
    first = checked.drafter(req.drafters[0])
    sspec = server_spec(checked.engine.release, first)
    why = [swappable(first, checked.drafter(d)) for d in req.drafters[1:]]
    for d in req.drafters:
        assert (counts.opened(d), counts.parsed(d)) == (1, 1), (d, counts.calls)
        assert isinstance(checked.opened[d], OpenedDrafter) and checked.reports[d].ok
    assert counts.parsed(three["target"]) == 1, counts.calls  # the target's config too, for all three
    assert why[0] is None and why[1] is not None and "norm_output" in why[1]
    assert json.loads(spec.env["CKPT_SWAP_SPEC"]) == sspec and spec.drafter == req.drafters[0]


def test_the_path_forms_give_what_the_opened_forms_give(three: dict[str, Any]) -> None:
    req = _request(three)
    assert req.launch is not None
    checked = check_launch(req.launch, req.drafters, req.pinned)
    release = checked.engine.release
    d0, *others = req.drafters
    assert server_spec(release, d0) == server_spec(release, checked.drafter(d0))
    for d in others:
        assert swappable(d0, d) == swappable(checked.drafter(d0), checked.drafter(d))
    launch = dataclasses.replace(req.launch, drafter=d0)
    assert prepare_launch(launch, release) == prepare_launch(launch, release, checked.drafter(d0))
    assert shared_launch(req, checked) == prepare_launch(launch, release)


def test_validate_opens_a_drafter_once_and_finds_what_it_found(three: dict[str, Any], counts: Counts) -> None:
    for d in three["drafters"]:
        before = counts.parsed(three["target"])
        by_path = validate(d, three["target"], engine="sglang==0.5.17", load_plan=True)
        assert (counts.opened(d), counts.parsed(d)) == (1, 1), counts.calls  # its quantization checks included
        assert counts.parsed(three["target"]) == before + 1  # the target's config read once too
        opened = open_once(d)
        by_opened = validate(opened, three["target"], engine="sglang==0.5.17", load_plan=True)
        assert counts.opened(d) == 2  # open_once here; validate read the opened drafter as it was
        assert by_opened.to_dict() == by_path.to_dict()
        assert open_once(opened) is opened


def test_a_config_alone_is_refused_where_weights_are_needed(tmp_path: Path) -> None:
    from ckpttools.errors import NoWeightsError

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    for given in (tmp_path, cfg):
        opened = open_once(given)
        assert opened.checkpoint is None and opened.config == {"architectures": ["LlamaForCausalLMEagle3"]}
        with pytest.raises(NoWeightsError):
            opened.require_checkpoint()
        with pytest.raises(NoWeightsError):
            swappable(opened, opened)
