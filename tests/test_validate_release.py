"""validate in the reading of one engine release, and its load plan (issue 22)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_known_pair, write_tensors
from ckpttools.io.checkpoint import open_checkpoint


def _mislabelled(root):
    """The drafter seen drafting garbage on SGLang 0.5.17: labelled LlamaForCausalLMEagle3, two
    layers, and layer 1 still carrying vLLM's norm name (input_layernorm, not hidden_norm)."""
    _, dp = build_known_pair(root, drafter_layers=2)
    with open_checkpoint(dp) as ck:
        ts = {n: ck.read(n).copy() for n in ck.tensors}
        cfg = dict(ck.config or {})
    ts["layers.1.input_layernorm.weight"] = ts.pop("layers.1.hidden_norm.weight")
    write_tensors(root / "bad", ts, cfg)
    return root / "bad"


def test_the_mislabelled_drafter_names_the_param_left_at_init_and_the_tensor_dropped(tmp_path):
    bad = _mislabelled(tmp_path)
    for release in ("sglang==0.5.17", "sglang==0.5.23"):
        r = CliRunner().invoke(cli, ["validate", str(bad), "--engine", release, "--load-plan", "--json"])
        assert r.exit_code == 1, r.output
        rep = json.loads(r.stdout)
        assert rep["engine_release"] == release and rep["engine_release_from"] == "given"
        plan = rep["load_plan"]
        assert plan["class"] == "LlamaForCausalLMEagle3" and plan["engine"] == {
            "name": "sglang",
            "release": release[8:],
        }
        params = {p["name"]: p for p in plan["params"]}
        assert params["model.layers.1.hidden_norm.weight"]["source"] == "init"
        assert params["model.layers.1.hidden_norm.weight"]["init"] == "ones"
        fates = {t["name"]: t for t in plan["tensors"]}
        assert fates["layers.1.input_layernorm.weight"]["fate"] == "dropped"
        ids = {f["id"] for f in rep["findings"]}
        assert {"load_plan.param_at_init", "load_plan.tensor_dropped"} & ids
        text = " ".join(
            f["message"] + " " + (f["hint"] or "") for f in rep["findings"] if f["id"].startswith("load_plan")
        )
        assert "hidden_norm" in text and "ones" in text
    r = CliRunner().invoke(cli, ["validate", str(bad), "--load-plan"])  # the human table names them too
    assert "param   init        model.layers.1.hidden_norm.weight = ones" in r.stdout
    assert "tensor  dropped  layers.1.input_layernorm.weight" in r.stdout


def test_without_a_release_the_newest_known_is_used_and_said(tmp_path):
    _, dp = build_known_pair(tmp_path)
    r = CliRunner().invoke(cli, ["validate", str(dp), "--json"])
    rep = json.loads(r.stdout)
    assert rep["engine_release"] == "sglang==0.5.23" and rep["engine_release_from"] == "the newest known release"
    r = CliRunner().invoke(cli, ["validate", str(dp), "--engine", "sglang==0.4.0"])
    assert r.exit_code == 2 and "sglang==0.5.17, sglang==0.5.23" in r.stderr
