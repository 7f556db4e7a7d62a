"""A local server that answers as vLLM 0.32 does for what ``ckpt swap`` asks (/metrics, /version,
/v1/models, /v1/completions, /collective_rpc, /reset_prefix_cache), whose /collective_rpc runs the
REAL hook (ckpttools/engines/serverside/ckpt_swap.py's ``VllmDrafterSwap``: guard, key, lock,
staged write, state, log line) on a draft model of real tensors, built from the launch drafter by
the release table's name rules. Only the engine around it is played: the draft model is a set of
parameters whose ``load_weights`` copies each file tensor into its parameter (stacked parts in
their shard slices), and a completion reports accept length 4.0 (3 drafts accepted of 3 per step)
unless the drafter loaded is named ``noise*`` (1.0).

``http://127.0.0.1:PORT/MODE-ANYTHING`` is a server of its own (its own hook module, state and
model) per first path segment; MODE is ``ok`` (honest), ``sg`` (SGLang 0.5.17's answers instead:
/server_info with the loader named, /update_weights_from_tensor behind the admin key, running the
real ``sglang_load_drafter`` on an ``EagleDraftWorker``'s model and cached map, weight_version),
``liar`` (every answer claims another
drafter's digest), ``tamper`` (each swap also writes one element of the target: the target digest
must catch it), ``nohook`` (no development endpoints: 404), ``failwrite`` (the write fails after
the first tensor: the hook must put the old values back).

The swap root is ``ROOT`` under the folder given; the key is :data:`KEY`. The drafters in it:
``d`` (the launch drafter), ``d2`` (another seed), ``noise`` (another seed, measured 1.0),
``wide`` (hidden size 96: another target's), ``fifo`` (model.safetensors a FIFO), ``empty`` (0
bytes), ``junk`` (not safetensors), ``linkout`` (a link to a drafter outside the root); ``outside``
lies beside the root.
"""

from __future__ import annotations

import importlib.util
import sys
import io
import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.fake_servers import QuietHTTPServer

KEY = "sesame-key"
REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "ckpttools" / "engines" / "serverside" / "ckpt_swap.py"


def build_root(base: Path) -> tuple[Path, Path]:
    """(the swap root, the target), built once under ``base``."""
    from ckpttools.demo.tiny import build_drafter, build_target

    root, target = base / "hookroot", base / "hooktarget"
    if root.is_dir():
        return root, target
    build_target(target)
    root.mkdir(parents=True)
    build_drafter(root / "d", "vllm", seed=1)
    build_drafter(root / "d2", "vllm", seed=2)
    build_drafter(root / "noise", "vllm", seed=3)
    build_drafter(root / "wide", "vllm", hidden_size=96, seed=4)
    build_drafter(base / "outside", "vllm", seed=5)
    build_drafter(base / "sg-outside", "sglang", seed=5)
    for name in ("d", "d2", "noise"):
        build_drafter(root / f"sg-{name}", "sglang", seed={"d": 1, "d2": 2, "noise": 3}[name])
    for name in ("fifo", "empty", "junk"):
        shutil.copytree(root / "d", root / name)
        (root / name / "model.safetensors").unlink()
    os.mkfifo(root / "fifo" / "model.safetensors")
    (root / "empty" / "model.safetensors").write_bytes(b"")
    (root / "junk" / "model.safetensors").write_bytes(b"\x08\0\0\0\0\0\0\0not json" + b"\0" * 64)
    os.symlink(base / "outside", root / "linkout")
    return root, target


class Params:
    """The draft model as the hook sees it: named parameters and ``load_weights``."""

    def __init__(self, mod: Any, spec: dict[str, Any], files: dict[str, Any], fail_after: int | None = None) -> None:
        import torch

        self.mod, self.spec, self.fail_after = mod, spec, None
        self.params: dict[str, Any] = {}
        self.slices: dict[tuple[str, str | None], tuple[int, int]] = {}
        for p, parts in mod._expected(files, spec, set()).items():
            names = [n for n, _ in parts]
            if any(mod._never(n, spec) for n in names):
                continue
            ts = [files[n] for n in names]
            start = 0
            for (_, shard), t in zip(parts, ts):
                self.slices[(p, shard)] = (start, t.shape[0] if t.dim() else 1)
                start += t.shape[0] if t.dim() else 1
            shape = (start, *ts[0].shape[1:]) if len(ts) > 1 else tuple(ts[0].shape)
            self.params[p] = torch.nn.Parameter(torch.zeros(shape, dtype=ts[0].dtype), requires_grad=False)
        self.load_weights([(n, t) for n, t in files.items() if not mod._never(n, spec)])
        self.fail_after = fail_after  # the launch's load succeeded; a later write fails after this many tensors

    def named_parameters(self, remove_duplicate: bool = True) -> Any:
        return iter(self.params.items())

    def parameters(self) -> Any:
        return iter(self.params.values())

    def named_modules(self) -> Any:
        return iter([("", self)])  # no layers: each parameter is read back by its bytes

    def load_weights(self, weights: Any) -> None:
        import torch

        with torch.no_grad():
            for i, (name, t) in enumerate(weights):
                if self.fail_after is not None and i >= self.fail_after:
                    raise RuntimeError("injected: the device failed mid-write")
                p, shard = self.mod._param_name(name, self.spec)
                if p not in self.params and not p.startswith(tuple(self.spec.get("no_prefix", []))):
                    p = self.spec.get("prefix", "") + p
                param = self.params[p]
                if shard is None:
                    param.copy_(t.reshape(param.shape))
                else:
                    a, n = self.slices[(p, shard)]
                    param[a : a + n].copy_(t.reshape(param[a : a + n].shape))


def _target_model(target: Path) -> Any:
    """The target as the hook digests it: a torch module holding every tensor of the target's file
    (names with their dots made underscores), so ckpt_digest.model_digest reads real weights."""
    import torch
    from safetensors.torch import load_file

    class LlamaForCausalLM(torch.nn.Module):
        pass

    m = LlamaForCausalLM()
    for n, t in load_file(str(target / "model.safetensors")).items():
        m.register_parameter(n.replace(".", "_"), torch.nn.Parameter(t, requires_grad=False))
    return m


def _byte_tensors(payload: str) -> list[tuple[str, Any]]:
    """The swap payload as SGLang's SafeUnpickler reads it, ``torch.ByteTensor`` the one global allowed."""
    import base64
    import pickle

    import torch

    class Only(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) == ("torch", "ByteTensor"):
                return torch.ByteTensor
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed")

    return list(Only(io.BytesIO(base64.b64decode(payload))).load())


class _OwnStderr:
    """A hook module's ``sys``: the process's, but with ``stderr`` its server's log."""

    def __init__(self, log: io.StringIO) -> None:
        self.stderr = log

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)


class HookServer:
    """One MODE's server: its own copy of the hook module (state, lock, environment)."""

    def __init__(self, mode: str, root: Path, target: Path) -> None:
        from ckpttools.engines.guarded import guard_env
        from ckpttools.engines.releases import resolve
        from ckpttools.engines.swap import server_spec

        if str(HOOK.parent) not in sys.path:  # as on a server: the folder is on its path (ckpt_digest beside it)
            sys.path.insert(0, str(HOOK.parent))
        spec_ = importlib.util.spec_from_file_location(f"ckpt_swap_host_{id(self)}", HOOK)
        assert spec_ is not None and spec_.loader is not None
        mod = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(mod)
        # the hook's own lines (print(..., file=sys.stderr): a server's log) go to this server's log
        # through the module's own `sys`. Not contextlib.redirect_stderr: that swaps the process's
        # sys.stderr from this server's request thread, and an in-process corpus case on the main
        # thread meanwhile wrote its error line there, its stderr captured empty (exit 2, re-run in a
        # process: serve-swap-check-huge, serve-opt-port-0, serve-swap-min-below-one, 2026-12-05/06)
        self.log = io.StringIO()
        mod.sys = _OwnStderr(self.log)
        first = root / ("sg-d" if mode == "sg" else "d")
        release = resolve("sglang==0.5.17" if mode == "sg" else "vllm==0.32.0")
        spec = server_spec(release, first)
        spec.pop("reload", None)  # the CPU build's kernel repacking: no such layers here
        mod.ENVIRON = {**guard_env(root, KEY, first), "CKPT_SWAP_SPEC": json.dumps(spec)}
        files, _ = mod.read_guarded(str(first), {})
        if mode == "sg":
            import torch

            d2t = files.pop("d2t")
            files.pop("t2d", None)
            draft = type("LlamaForCausalLMEagle3", (Params,), {})(mod, spec, files)
            draft.hot_token_id = d2t.to(torch.long) + torch.arange(len(d2t))
            runner = type("Runner", (), {"model": draft})()
            self.eagle = type(
                "EagleDraftWorker", (), {"draft_runner": runner, "hot_token_id": draft.hot_token_id.clone()}
            )()
            self.label: str | None = "default"
        else:
            draft = Params(mod, spec, files, fail_after=1 if mode == "failwrite" else None)
        self.target_model = _target_model(target)
        runner = type("Runner", (), {"get_draft_model": lambda s: draft, "get_model": lambda s: self.target_model})()
        self.worker = type("Worker", (mod.VllmDrafterSwap,), {"model_runner": runner})()
        self.mod, self.mode, self.target, self.draft = mod, mode, target, draft
        self.lock = threading.Lock()

    def rpc(self, body: dict[str, Any]) -> tuple[int, Any]:
        method = body.get("method")
        if not isinstance(method, str) or not method.startswith("ckpt_"):
            return 400, {"error": f"no method {method!r}"}
        answer = getattr(self.worker, method)(*body.get("args", []))
        if self.mode == "tamper" and method == "ckpt_swap":  # a swap that writes one target element too
            import torch

            with torch.no_grad():
                next(iter(self.target_model.parameters())).view(-1)[0] += 1
        if self.mode == "liar":
            a = json.loads(answer)
            for k in ("digest",):
                if a.get(k):
                    a[k] = "0" * 64
            if isinstance(a.get("state"), dict):
                a["state"]["digest"] = "0" * 64
            answer = json.dumps(a)
        return 200, {"results": [answer]}

    def sglang_update(self, headers: Any, body: dict[str, Any]) -> tuple[int, Any]:
        """/update_weights_from_tensor as SGLang 0.5.17 runs it: the admin key, then the custom
        loader on the draft model (and on the target, which it returns from), then weight_version."""
        if headers.get("Authorization") != f"Bearer {KEY}":
            return 401, {"error": "Unauthorized"}
        named = _byte_tensors(body["serialized_named_tensors"][0])
        self.mod.sglang_load_drafter(self.draft, named)
        self.mod.sglang_load_drafter(self.target_model, named)
        if body.get("weight_version") is not None:
            self.label = body["weight_version"]
        return 200, {"success": True, "message": "Success"}

    def accept(self) -> float:
        st = self.mod.state()
        return 1.0 if "noise" in Path(str(st.get("path"))).name else 4.0


class HookHost:
    """A real HTTP server on 127.0.0.1; one :class:`HookServer` per first path segment."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root, self.target = build_root(base)
        self.servers: dict[str, HookServer] = {}
        self._lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
                b = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def _route(self) -> tuple[HookServer, str]:
                parts = self.path.split("/", 2)
                return outer.server(parts[1]), "/" + (parts[2] if len(parts) > 2 else "")

            def do_GET(self) -> None:
                srv, path = self._route()
                if srv.mode == "sg":
                    return self._sglang_get(srv, path)
                if path == "/metrics":
                    return self._send(200, "vllm:spec_decode_num_drafts_total 0.0\n", "text/plain")
                if path == "/version":
                    return self._send(200, {"version": "0.32.0"})
                if path == "/v1/models":
                    return self._send(
                        200, {"data": [{"id": str(srv.target), "root": str(srv.target), "max_model_len": 1024}]}
                    )
                if path == "/health":
                    return self._send(200, {})
                self._send(404, {"detail": "Not Found"})

            def _sglang_get(self, srv: HookServer, path: str) -> None:
                if path in ("/server_info", "/get_server_info"):
                    info = {
                        "version": "0.5.17",
                        "model_path": str(srv.target),
                        "speculative_algorithm": "EAGLE3",
                        "speculative_num_steps": 3,
                        "speculative_eagle_topk": 1,
                        "speculative_num_draft_tokens": 4,
                        "tp_size": 1,
                        "skip_tokenizer_init": True,
                        "custom_weight_loader": ["ckpt_swap.sglang_load_drafter"],
                        "weight_version": srv.label,
                        "internal_states": [{}],
                    }
                    return self._send(200, info)
                return self._send(200, {}) if path == "/health" else self._send(404, {"detail": "Not Found"})

            def _sglang_post(self, srv: HookServer, path: str, body: dict[str, Any]) -> None:
                from tests.fake_servers import meta_0517

                if path == "/update_weights_from_tensor":
                    with srv.lock:
                        return self._send(*srv.sglang_update(self.headers, body))
                if path == "/update_weight_version":
                    if self.headers.get("Authorization") != f"Bearer {KEY}":
                        return self._send(401, {"error": "Unauthorized"})
                    srv.label = body["new_version"]
                    return self._send(200, {"success": True, "new_version": srv.label})
                if path == "/flush_cache":
                    return self._send(200, {})
                if path == "/generate":
                    meta = meta_0517(16, 4, 12) if srv.accept() == 4.0 else meta_0517(4, 4, 0)
                    return self._send(200, {"output_ids": [20] * meta["completion_tokens"], "meta_info": meta})
                self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                srv, path = self._route()
                body = json.loads(raw or b"{}")
                if srv.mode == "sg":
                    return self._sglang_post(srv, path, body)
                if path == "/collective_rpc" and srv.mode != "nohook":
                    with srv.lock:
                        code, ans = srv.rpc(body)
                    return self._send(code, ans)
                if path == "/reset_prefix_cache" and srv.mode != "nohook":
                    return self._send(200, {})
                if path == "/v1/completions":
                    acc = srv.accept()
                    k = 3 if acc == 4.0 else 0
                    spec = {"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 4 * k}
                    out = {"choices": [{"text": "x"}], "usage": {"completion_tokens": 4 + 4 * k}}
                    return self._send(200, {**out, "metrics": {"speculative_decoding": spec}})
                self._send(404, {"detail": "Not Found"})

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), H)  # daemon threads; shutdown seen within SHUTDOWN_POLL
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def server(self, segment: str) -> HookServer:
        with self._lock:
            if segment not in self.servers:
                self.servers[segment] = HookServer(segment.split("-", 1)[0], self.root, self.target)
            return self.servers[segment]

    def __enter__(self) -> HookHost:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
