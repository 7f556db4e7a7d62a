"""The guarded swap hook (engines/serverside/ckpt_swap.py) as the server runs it, and
``ckpttools.measuring.serve.swap_drafter`` against it (tests/hook_host.py: vLLM's answers around the
real hook, on a draft model of real tensors). The refusals here are the server's own (the client's
own checks come first on the CLI: tests/corpus_serve.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ckpttools.engines.guarded import drafter_digest

from .hook_host import KEY, HookHost, HookServer

LINE = re.compile(
    r'ckpttools swap: drafter="(?P<path>(?:[^"\\]|\\.)*)" digest=(?P<digest>[0-9a-f]{16}) '
    r"rank=(?P<rank>\d+) world=(?P<world>\d+) maps=(?P<maps>replaced|none)"
)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with HookHost(tmp_path_factory.mktemp("hook")) as h:
        yield h


def _swap(srv: HookServer, path: Path | str, key: str = KEY) -> dict[str, Any]:
    code, ans = srv.rpc({"method": "ckpt_swap", "args": [str(path), key]})
    assert code == 200
    return json.loads(ans["results"][0])


def _values(srv: HookServer) -> dict[str, bytes]:
    return {
        n: p.detach().contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes()
        for n, p in srv.draft.params.items()
    }


def test_the_digest_is_the_documented_one_on_both_sides(host: HookHost) -> None:
    d = host.root / "d2"
    h = hashlib.sha256()
    for n in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        data = (d / n).read_bytes()
        pieces = b"".join(hashlib.sha256(data[i : i + (64 << 20)]).digest() for i in range(0, len(data), 64 << 20))
        h.update(n.encode() + b"\0" + str(len(data)).encode() + b"\0" + pieces)
    srv = host.server("ok-digest")
    _, server_side = srv.mod.read_guarded(str(d))
    assert drafter_digest(d) == server_side == h.hexdigest()


@pytest.mark.parametrize(
    ("drafter", "why"),
    [
        ("fifo", "model.safetensors: a FIFO, not a safetensors file"),
        ("empty", "model.safetensors: 0 bytes, not a safetensors file"),
        ("junk", "model.safetensors: not a safetensors file"),
        ("linkout", "a link leads out of it"),
        ("nope", "cannot be read"),
    ],
)
def test_the_server_refuses_what_is_no_regular_safetensors_file_under_its_root(
    host: HookHost, drafter: str, why: str
) -> None:
    srv = host.server(f"ok-refuse-{drafter}")
    before = _values(srv)
    t0 = time.monotonic()
    a = _swap(srv, host.root / drafter)
    assert time.monotonic() - t0 < 10  # a FIFO is never opened blocking
    assert why in a["refused"] and "loaded" not in a
    assert a["state"]["generation"] == 0 and _values(srv) == before
    assert not LINE.search(srv.log.getvalue())


def test_the_server_refuses_a_path_outside_its_root_a_relative_one_and_a_file_link_out(host: HookHost) -> None:
    srv = host.server("ok-outside")
    assert "it lies outside it" in _swap(srv, host.base / "outside")["refused"]
    assert "not an absolute path" in _swap(srv, "hookroot/d2")["refused"]
    inner = host.root / "filelink"
    if not inner.exists():
        inner.mkdir()
        (inner / "config.json").write_text((host.root / "d" / "config.json").read_text())
        os.symlink(host.base / "outside" / "model.safetensors", inner / "model.safetensors")
    assert "a link leading out of the swap root" in _swap(srv, inner)["refused"]


def test_the_key_is_checked_by_the_hook_itself(host: HookHost) -> None:
    srv = host.server("ok-key")
    assert _swap(srv, host.root / "d2", key="")["refused"].startswith("no key given")
    assert _swap(srv, host.root / "d2", key="sesame-kez")["refused"].startswith("wrong key")
    a = _swap(srv, host.root / "d2")
    assert a.get("refused") is None and a["state"]["generation"] == 1


def test_a_write_that_fails_midway_puts_the_old_values_back(host: HookHost) -> None:
    srv = host.server("failwrite-values")
    before = _values(srv)
    a = _swap(srv, host.root / "d2")
    assert "the old weights were put back" in a["refused"]
    assert _values(srv) == before  # never a mix: every parameter is the old drafter's
    assert a["state"]["digest"] == drafter_digest(host.root / "d") and a["state"]["generation"] == 0


def test_one_line_per_swap_names_the_drafter_by_digest(host: HookHost) -> None:
    srv = host.server("ok-line")
    for d in ("d2", "noise", "d"):
        _swap(srv, host.root / d)
    lines = [LINE.fullmatch(x) for x in srv.log.getvalue().splitlines()]
    assert all(lines) and len(lines) == 3
    for m, d in zip(lines, ("d2", "noise", "d")):
        assert m is not None
        assert json.loads(f'"{m["path"]}"') == str(host.root / d)
        assert m["digest"] == drafter_digest(host.root / d)[:16]
        assert (m["rank"], m["world"], m["maps"]) == ("0", "1", "replaced")


def test_the_hook_host_writes_its_lines_without_touching_the_processs_stderr(host: HookHost) -> None:
    """The hook's line goes to its server's log while sys.stderr stays what it was: a request thread
    that swapped sys.stderr (contextlib.redirect_stderr) took the error line of an in-process corpus
    case running on the main thread meanwhile, whose stderr was then captured empty."""
    import sys

    srv = host.server("ok-stderr")
    seen: list[object] = []

    class Log:
        def write(self, s: str) -> int:
            seen.append(sys.stderr)  # what the process's stderr is while the hook writes its line
            return len(s)

        def flush(self) -> None:
            pass

    srv.mod.sys.stderr = Log()
    before = sys.stderr
    _swap(srv, host.root / "d2")
    assert seen and all(x is before for x in seen), seen
    assert sys.stderr is before


def test_two_swaps_at_once_are_never_interleaved(host: HookHost) -> None:
    """Two swaps sent at once to one worker (no engine lock in between): the hook's lock makes the
    second wait; each write is whole, and the state is the last one's."""
    srv = host.server("ok-race")
    inside: list[int] = []
    overlap: list[bool] = []
    real = srv.draft.load_weights

    def slow(weights: Any) -> None:
        inside.append(1)
        overlap.append(len(inside) > 1)
        time.sleep(0.3)
        real(weights)
        inside.pop()

    srv.draft.load_weights = slow  # type: ignore[method-assign]
    out: list[dict[str, Any]] = []
    ts = [threading.Thread(target=lambda d=d: out.append(_swap(srv, host.root / d))) for d in ("d2", "noise")]
    [t.start() for t in ts]
    [t.join() for t in ts]
    srv.draft.load_weights = real  # type: ignore[method-assign]
    assert overlap == [False, False] and all(a.get("refused") is None for a in out)
    st = srv.mod.state()
    assert st["generation"] == 2 and st["digest"] == out[-1]["digest"]
    last = Path(st["path"]).name
    srv2 = host.server(f"ok-race-ref-{last}")
    _swap(srv2, host.root / last)
    assert _values(srv) == _values(srv2)  # the last swap's bytes, whole


def test_the_sglang_loader_writes_answers_only_into_a_private_folder(host: HookHost, tmp_path: Path) -> None:
    """The SGLang route: the same guard, and an answer path that is no private rankN.json is never written."""
    srv = host.server("ok-sglang")
    mod = srv.mod
    model = type("LlamaForCausalLMEagle3", (), {})()
    mod.ENVIRON = {**mod.ENVIRON, "CKPT_SWAP_SPEC": json.dumps({"draft_classes": ["LlamaForCausalLMEagle3"]})}
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    for dest in (open_dir / "rank0.json", tmp_path / "x" / "rank0.json", open_dir / "passwd"):
        mod.sglang_load_drafter(model, [(mod.SWAP_TAG, json.dumps({"op": "state", "answer": str(dest)}))])
        assert not dest.exists()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    req = {"op": "swap", "path": str(host.base / "outside"), "key": KEY, "answer": str(private / "rank{rank}.json")}
    mod.sglang_load_drafter(model, [(mod.SWAP_TAG, json.dumps(req))])
    a = json.loads((private / "rank0.json").read_text())
    assert "outside it" in a["refused"] and a["state"]["generation"] == 0


def test_swap_drafter_returns_a_frozen_report_and_rolls_back_below_the_bar(host: HookHost) -> None:
    from ckpttools.measuring.serve import swap_drafter

    url = host.url + "/ok-library"
    rep = swap_drafter(url, host.root / "d2", api_key=KEY)
    assert rep.exit_code == 0 and rep.after.digest == drafter_digest(host.root / "d2") and rep.before.source == "launch"
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.exit_code = 1  # type: ignore[misc]
    low = swap_drafter(url, host.root / "noise", api_key=KEY, check=3, min_accept_len=2.0, max_new_tokens=8)
    assert low.exit_code == 1 and low.rolled_back and low.check is not None and low.check.accept_length == 1.0
    assert low.rollback is not None and low.rollback.ok and low.after.digest == rep.after.digest
    assert low.after.generation == 3  # d2, noise, d2 again
    # the target (the hook host's: every tensor of the tiny target's file) digested before and after
    n = len(__import__("safetensors").safe_open(str(host.target / "model.safetensors"), "np").keys())
    assert (
        low.target_check.startswith(f"target unchanged: {n} parameters, ")
        and "before the first swap" in low.target_check
    )
    assert rep.target_check.startswith(f"target unchanged: {n} parameters, ")


def test_a_swap_that_writes_the_target_fails_the_report(host: HookHost) -> None:
    from ckpttools.measuring.serve import swap_drafter

    rep = swap_drafter(host.url + "/tamper-target", host.root / "d2", api_key=KEY)
    assert rep.exit_code == 1 and rep.target_check.startswith("target CHANGED: ")
    assert "differs in " in rep.target_check and "the TARGET's weights changed" in rep.verdict


def test_a_previous_drafter_rewritten_in_place_is_not_rolled_back_to(host: HookHost, tmp_path: Path) -> None:
    import shutil

    from ckpttools.errors import ServerError
    from ckpttools.measuring.serve import swap_drafter

    mine = host.root / "rewritten"
    if mine.exists():
        shutil.rmtree(mine)
    shutil.copytree(host.root / "d2", mine)
    url = host.url + "/ok-rewritten"
    swap_drafter(url, mine, api_key=KEY)
    shutil.copyfile(host.root / "d" / "model.safetensors", mine / "model.safetensors")  # the RL loop wrote over it
    with pytest.raises(ServerError, match="changed on disk since it was loaded"):
        swap_drafter(url, host.root / "noise", api_key=KEY, check=2, min_accept_len=2.0, max_new_tokens=8)


def test_the_report_follows_its_schema(host: HookHost) -> None:
    import jsonschema

    from ckpttools.measuring.serve import swap_drafter

    schema = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "swap-report.schema.json").read_text())
    rep = swap_drafter(
        host.url + "/ok-schema", host.root / "noise", api_key=KEY, check=2, min_accept_len=2.0, max_new_tokens=8
    )
    jsonschema.validate(json.loads(json.dumps(rep.to_dict())), schema)
    assert rep.to_dict()["rollback"]["ok"] is True


def test_verify_host_says_which_drafter_is_loaded(host: HookHost) -> None:
    from ckpttools.measuring.serve import swap_drafter
    from ckpttools.measuring.verify import verify

    url = host.url + "/ok-verify"
    swap_drafter(url, host.root / "d2", api_key=KEY)
    rep = verify(url, engine="vllm", num_prompts=2, max_new_tokens=8)
    loaded = rep.server["drafter_loaded"]
    assert loaded["digest16"] == drafter_digest(host.root / "d2")[:16] and loaded["path"] == str(host.root / "d2")


def test_sglang_route_end_to_end_key_label_map_and_rollback(host: HookHost) -> None:
    """SGLang 0.5.17's answers around the real loader: the admin key (401 without it), the payload
    through the one allowed global, the cached map replaced in the draft worker, weight_version set
    to the short digest and put back after a refused swap, the rollback below the bar."""
    import torch
    from safetensors.torch import load_file

    from ckpttools.errors import ServerError
    from ckpttools.measuring.serve import swap_drafter

    url = host.url + "/sg-route"
    srv = host.server("sg-route")
    with pytest.raises(ServerError, match="HTTP 401"):
        swap_drafter(url, host.root / "sg-d2", api_key="nope")
    rep = swap_drafter(url, host.root / "sg-d2", api_key=KEY)
    dg = drafter_digest(host.root / "sg-d2")
    assert rep.engine == "sglang" and rep.swap.ok and rep.swap.maps_replaced == 1 and rep.label == dg[:16]
    assert srv.label == dg[:16] and rep.after.digest == dg and "read back" in rep.swap.checked
    # the target digested by the loader on its call for the target model, behind the admin key
    assert rep.target_check.startswith("target unchanged: ") and "by the hook, on 1 rank" in rep.target_check
    d2t = load_file(host.root / "sg-d2" / "model.safetensors")["d2t"].to(torch.long)
    assert torch.equal(srv.eagle.hot_token_id, d2t + torch.arange(len(d2t)))  # the worker's cached map
    with pytest.raises(ServerError, match="not under the swap root"):
        swap_drafter(url, host.base / "sg-outside", api_key=KEY)
    assert srv.label == dg[:16]  # the refused swap's label taken back: it names what is loaded
    low = swap_drafter(url, host.root / "sg-noise", api_key=KEY, check=2, min_accept_len=2.0, max_new_tokens=8)
    assert low.rolled_back and low.exit_code == 1 and low.after.digest == dg and srv.label == dg[:16]
    assert LINE.search(srv.log.getvalue())


def test_verify_host_on_sglang_names_the_drafter_from_weight_version(host: HookHost, tmp_path: Path) -> None:
    from ckpttools.measuring.serve import swap_drafter
    from ckpttools.measuring.verify import verify

    url = host.url + "/sg-verify"
    swap_drafter(url, host.root / "sg-d2", api_key=KEY)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"input_ids": [5, 6, 7]}\n')
    rep = verify(url, engine="sglang", prompts=str(prompts), num_prompts=1, max_new_tokens=8)
    assert rep.server["drafter_loaded"]["digest16"] == drafter_digest(host.root / "sg-d2")[:16]
    assert "weight_version" in rep.server["drafter_loaded"]["from"]


def test_ckpt_serve_names_a_relative_target_by_its_absolute_path(host: HookHost, tmp_path: Path, monkeypatch) -> None:
    """A new user's run: `ckpt serve --target t` from the target's folder, then `ckpt swap` from another
    folder. The server names its model as it was launched, and ckpt swap validates against that
    name where it runs: a relative one (found in such a run) is no folder there."""
    import shutil

    from ckpttools.measuring.serve import serve_command

    shutil.copytree(host.target, tmp_path / "t")
    shutil.copytree(host.root / "d", tmp_path / "drafters" / "a")
    monkeypatch.chdir(tmp_path)
    cmd = serve_command("vllm==0.32.0", "t", "drafters/a", "drafters", api_key=KEY)
    model = cmd.argv[cmd.argv.index("--model") + 1]
    assert model == str(tmp_path / "t") and os.path.isabs(model), cmd.argv
    hub = serve_command("vllm==0.32.0", "org/not-here", "drafters/a", "drafters", api_key=KEY)
    assert hub.argv[hub.argv.index("--model") + 1] == "org/not-here"  # a Hub id stays one
