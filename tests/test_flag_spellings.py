"""The release tables' ``flag_spellings`` (the other spellings an engine's parser takes for a flag
ckpttools sets itself) against the real vLLM 0.32 parser: the API server's own parser
(vllm/entrypoints/launchers/api_server/entry.py:224-228), built in the vLLM venv, lists exactly the
aliases the table lists for the flags ckpttools writes, reads ``--a_b`` as ``--a-b``, and lets a
``--flag.key`` given after ckpttools' JSON flag replace it; and every such spelling given as an
engine argument is refused before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ckpttools.engines.engine import VLLM
from ckpttools.engines.launch import LaunchSpec, build_command
from ckpttools.engines.releases import resolve
from ckpttools.errors import CkptError

REPO = Path(__file__).resolve().parents[1]
VLLM_PY = os.environ.get("CKPT_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")

_PARSER = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
p = make_arg_parser(FlexibleArgumentParser())
flags = json.loads(sys.argv[1])
strings = {f: a.option_strings for f in flags for a in p._actions if f in a.option_strings}
under = p.parse_args(["--model", "m", "--tensor_parallel_size=2"]).tensor_parallel_size
dotted = p.parse_args(["--model", "m", "--speculative-config", '{"method": "eagle3", "model": "d"}',
                       "--speculative-config.model=/elsewhere"]).speculative_config
print(json.dumps({"strings": strings, "underscores": under, "dotted": dotted}))
"""


def _own_flags() -> list[str]:
    """The flags ckpttools writes on a vLLM command line with a drafter."""
    argv = VLLM(resolve("vllm==0.32")).launch_argv(LaunchSpec("vllm", "/t", "/d"))
    return sorted({a.split("=", 1)[0] for a in argv if a.startswith("--")})


@pytest.mark.vllm
@pytest.mark.skipif(not Path(VLLM_PY).is_file(), reason=f"no vLLM interpreter at {VLLM_PY}")
def test_the_vllm_table_lists_what_the_real_parser_takes():
    own = _own_flags()
    got = subprocess.run([VLLM_PY, "-c", _PARSER, json.dumps(own)], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    read = json.loads(got.stdout.strip().splitlines()[-1])
    table = resolve("vllm==0.32").flag_spellings.value
    assert set(read["strings"]) == set(own), read  # every flag ckpttools writes is the parser's
    others = {f: tuple(s for s in strings if s != f) for f, strings in read["strings"].items()}
    assert {f: o for f, o in others.items() if o} == dict(table["aliases"])
    assert read["underscores"] == 2 and table["underscores"] is True
    assert read["dotted"] == {"model": "/elsewhere"} and table["dotted"] is True  # ckpttools' JSON replaced


@pytest.mark.parametrize("engine", ["vllm==0.32", "vllm==0.33", "sglang==0.5.17", "sglang==0.5.23"])
def test_every_other_spelling_of_an_own_flag_is_refused(engine):
    """Each alias of each flag ckpttools writes, in each form the table says the parser takes (as
    given, ``=VALUE``, with underscores, dotted), is refused by the launch; ckpttools' own spelling
    of a flag it merges (vLLM's --speculative-config=JSON) is not."""
    sp = resolve(engine).flag_spellings.value
    name = engine.split("==")[0]
    argv = build_command(LaunchSpec(name, "/t", "/d"))
    own = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    tried = 0
    for flag, aliases in sp["aliases"].items():
        assert flag in own, (engine, flag)
        for spelled in (*aliases, flag):
            merged = spelled == flag == "--speculative-config"  # taken in this spelling, and merged
            forms = [] if merged else [[spelled, "1"], [f"{spelled}=1"]]
            if sp["underscores"] and spelled.startswith("--"):
                forms.append(["--" + spelled[2:].replace("-", "_") + "=1"])
            if sp["dotted"]:
                forms.append([f"{spelled}.key=1"])
            for args in forms:
                with pytest.raises(CkptError, match=f"sets {flag}"):
                    build_command(LaunchSpec(name, "/t", "/d", engine_args=args))
                tried += 1
    assert tried >= 8
    if name == "vllm":
        got = build_command(LaunchSpec(name, "/t", "/d", engine_args=['--speculative-config={"method": "eagle3"}']))
        assert sum(a == "--speculative-config" for a in got) == 1
