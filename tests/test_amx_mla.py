"""vLLM's CPU build on a CPU with AMX serves MLA with its AMX backend, which packs the absorbed
attention weights for AMX tiles and refuses sizes that are not multiples of its tiles (CI on
such a CPU died loading the MLA test drafter: ``amx_mla.py:303 convert_weight_packed:
RuntimeError: invalid weight input features 16``). The checks are the release table's
(``ckpttools.engines.claims.VLLM_AMX_MLA_CHECKS``); here the MLA models tests/test_vllm_engine.py
serves are checked against them, validate names a drafter that fails them, and (with the vLLM venv,
on a CPU whose vLLM build has these ops) the checks are run against vLLM's own ops.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ckpttools.demo.tiny import build_drafter, build_known_pair
from ckpttools.engines.claims import VLLM_AMX_MLA_CHECKS, VLLM_CLAIMS
from ckpttools.engines.config_rules import amx_mla_refusal
from ckpttools.engines.releases import VLLM_0_33
from ckpttools.ops.export import export
from ckpttools.ops.validate import validate

REPO = Path(__file__).resolve().parents[1]
VLLM_PY = os.environ.get("CKPT_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
SIZES = ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "qk_rope_head_dim")


def _sizes(path: Path) -> dict[str, int]:
    cfg = json.loads((path / "config.json").read_text())
    return {k: cfg[k] for k in SIZES}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """The MLA target and drafter tests/test_vllm_engine.py serves (its three MLA tests build
    these with build_known_pair, latent 512), the drafter as export writes it for vLLM too."""
    root = tmp_path_factory.mktemp("amx")
    tp, dp = build_known_pair(root, target_arch="deepseek", drafter_flavor="mla", mla_latent=512)
    vp = Path(export(dp, root / "drafter-vllm", format="vllm", target=tp).output)
    return {"target": tp, "drafter": dp, "drafter-vllm": vp}


@pytest.fixture(scope="module")
def served(models) -> dict[str, dict[str, int]]:
    return {k: _sizes(p) for k, p in models.items()}


def test_the_vllm_tests_mla_models_have_sizes_the_amx_backend_takes(served):
    """Each of the MLA models tests/test_vllm_engine.py serves passes every check of the AMX
    backend, and has the one latent + rope width both CPU MLA backends take (576)."""
    assert {k for k, *_ in VLLM_AMX_MLA_CHECKS} == {"kv_lora_rank", "qk_nope_head_dim", "v_head_dim"}
    for name, s in served.items():
        assert amx_mla_refusal(s) is None, (name, s)
        assert s["kv_lora_rank"] + s["qk_rope_head_dim"] == 576, (name, s)
    assert served["drafter"]["qk_nope_head_dim"] == 32 and served["target"]["v_head_dim"] == 64


def test_the_checks_give_the_error_ci_met_and_each_other():
    """The drafter CI failed on (qk_nope_head_dim 16) gets the error it met, at the line it met it;
    each check in its turn gives its own error."""
    bad = amx_mla_refusal({"kv_lora_rank": 512, "qk_nope_head_dim": 16, "v_head_dim": 32})
    assert bad == {
        "field": "qk_nope_head_dim",
        "value": 16,
        "where": "$.qk_nope_head_dim",
        "error": "invalid weight input features 16",
        "when": "at load",
    }
    cases = {
        (504, 32, 32): "invalid weight out features 504",
        (512, 48, 32): "invalid weight input features 48",
        (512, 32, 24): "invalid weight out features 24",
        (528, 32, 32): "invalid weight input features 528",
        (512, 32, 48): "tinygemm requires N to be 32x.",
        (512, 32, 32): None,
    }
    for (lora, nope, v), want in cases.items():
        got = amx_mla_refusal({"kv_lora_rank": lora, "qk_nope_head_dim": nope, "v_head_dim": v})
        assert (got and got["error"]) == want, (lora, nope, v, got)
    assert amx_mla_refusal({"kv_lora_rank": 512, "qk_nope_head_dim": 16}) is None  # v_head_dim unknown
    assert "amx_mla.py:294-304" in VLLM_CLAIMS["cpu_mla.amx"][1]
    assert "476" in VLLM_CLAIMS["cpu_mla.amx"][0] and "477" in VLLM_0_33.claims.value["cpu_mla.amx"][0]


def test_validate_names_the_amx_refusal_for_vllm_only(tmp_path, models):
    """An MLA drafter of CI's failing sizes (two heads of 32 at latent 256: qk_nope_head_dim 16): a
    warning under --engine vllm naming the error, where and why; none for SGLang, none for the
    drafter the vLLM tests serve."""
    d = build_drafter(tmp_path / "d", "mla", hidden_size=64, num_heads=2, num_kv_heads=2)
    assert _sizes(d)["qk_nope_head_dim"] == 16
    found = [f for f in validate(d, engine="vllm==0.32").findings if f.id == "config.mla_amx_sizes"]
    assert len(found) == 1
    f = found[0]
    assert f.severity == "warning" and f.location == "$.qk_nope_head_dim"
    assert "vLLM 0.32's CPU build" in f.message and "amx_bf16 and amx_tile" in f.message
    assert 'qk_nope_head_dim 16 fails at load ("RuntimeError: invalid weight input features 16")' in f.message
    assert "amx_mla.py:301-304" in f.message
    assert f.hint is not None and "--attention-backend CPU_MLA" in f.hint
    assert not [f for f in validate(d, engine="sglang").findings if f.id == "config.mla_amx_sizes"]
    good = validate(models["drafter-vllm"], target=models["target"], engine="vllm==0.32")
    assert good.ok and not [f for f in good.findings if f.id == "config.mla_amx_sizes"]


#: run in vLLM's interpreter (its _C library loaded, vLLM not imported): for each size, W_UK and W_UV split and packed as amx_mla.py:294-304
#: does, then bmm_cpu on them as its prefill does (420-422, 476); the first RuntimeError's text, or
#: "ok" when both products equal torch's
_PROBE = r"""
import importlib.util, json, os, sys
import torch
# vLLM's own library, loaded as vllm/platforms/cpu.py:639-645 does on this CPU, without importing vLLM
torch.ops.load_library(os.path.join(importlib.util.find_spec("vllm").submodule_search_locations[0], "_C.abi3.so"))
bmm = torch.ops._C.bmm_cpu
out = []
for lora, nope, v in json.loads(sys.argv[1]):
    heads, tokens = 2, 5
    torch.manual_seed(0)
    w = torch.randn(heads * (nope + v), lora).to(torch.bfloat16)
    w_uk, w_uv = w.T.reshape(lora, heads, nope + v).split([nope, v], dim=-1)
    try:
        uk = torch.ops._C.convert_weight_packed(w_uk.permute(1, 0, 2).contiguous())
        uv = torch.ops._C.convert_weight_packed(w_uv.permute(1, 2, 0).contiguous())
        q = torch.randn(heads, tokens, nope).to(torch.bfloat16)
        ql = torch.empty(heads, tokens, lora, dtype=torch.bfloat16)
        bmm(ql, q, uk, True, None)
        a = torch.randn(heads, tokens, lora).to(torch.bfloat16)
        o = torch.empty(heads, tokens, v, dtype=torch.bfloat16)
        bmm(o, a, uv, True, None)
        ref_ql = torch.bmm(q.float(), w_uk.permute(1, 0, 2).float().transpose(1, 2))
        ref_o = torch.bmm(a.float(), w_uv.permute(1, 0, 2).float())
        ok = torch.allclose(ql.float(), ref_ql, atol=0.1, rtol=0.05) and torch.allclose(o.float(), ref_o, atol=0.1, rtol=0.05)
        out.append("ok" if ok else "wrong product")
    except RuntimeError as e:
        out.append(str(e).splitlines()[0])
print("RESULT " + json.dumps(out))
"""


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


@pytest.mark.vllm
@pytest.mark.skipif(not Path(VLLM_PY).is_file(), reason=f"no vLLM interpreter at {VLLM_PY} (tests/run.sh installs it)")
@pytest.mark.skipif(
    not {"avx512f", "avx512_bf16"} <= _cpu_flags(),
    reason="needs a CPU with avx512f and avx512_bf16 (/proc/cpuinfo): vLLM's CPU build loads vllm._C, the library "
    "with the AMX MLA backend's ops, only there (vllm/platforms/cpu.py:639-645); its other builds lack the ops",
)
def test_the_checks_are_vllms_own_ops(served):
    """vLLM's own convert_weight_packed and bmm_cpu (no AMX needed to run them: only the backend's
    selection asks for AMX) refuse exactly what the table's checks refuse, with the same text, and
    compute the right products for the sizes the vLLM tests serve."""
    sizes = [(s["kv_lora_rank"], s["qk_nope_head_dim"], s["v_head_dim"]) for s in served.values()]
    sizes += [(512, 16, 32), (504, 32, 32), (512, 48, 32), (512, 32, 24), (528, 32, 32), (512, 32, 48), (512, 64, 64)]
    r = subprocess.run(
        [VLLM_PY, "-c", _PROBE, json.dumps(sizes)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-2000:]
    got = dict(zip(map(tuple, sizes), json.loads(line[7:])))
    for lora, nope, v in sizes:
        want = amx_mla_refusal({"kv_lora_rank": lora, "qk_nope_head_dim": nope, "v_head_dim": v})
        assert got[(lora, nope, v)] == (want["error"] if want else "ok"), (lora, nope, v, got)
    print(got)
