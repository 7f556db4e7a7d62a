"""Runs inside a serving engine's own process (its interpreter, not ckpttools'): puts another
drafter, read from disk, in place of the running one, and reads weights back.

ckpttools puts this folder on the server's PYTHONPATH and names these entry points in its launch
flags (``ckpttools.engines.swap`` takes which from the engine-release table); what to reach inside
the engine comes in ``CKPT_SWAP_SPEC`` (JSON), from the same table. It imports only the standard
library, torch and safetensors, which every engine ships, and it reads safetensors only.

- vLLM: :class:`VllmDrafterSwap`, a worker extension (``--worker-extension-cls ckpt_swap.VllmDrafterSwap``),
  its methods called through ``POST /collective_rpc`` in every worker.
- SGLang: :func:`sglang_load_drafter`, a custom weight loader (``--custom-weight-loader
  ckpt_swap.sglang_load_drafter``), called through ``POST /update_weights_from_tensor`` with one
  (name, JSON string) pair per rank in place of tensors.

Every answer is a JSON string: what was loaded, what was skipped and why, how each touched
parameter was held against the file on the device (ckpt_digest.check_param), where the seconds
went, and on which rank. ``ckpt_target_digest`` (vLLM) and the payload op ``target_digest``
(SGLang) answer ckpt_digest.model_digest of the target model, taken in the process that holds it.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

#: the name a swap request carries in place of a tensor's (SGLang's payload)
SWAP_TAG = "__ckpttools_swap__"


def _spec() -> dict[str, Any]:
    return json.loads(os.environ.get("CKPT_SWAP_SPEC") or "{}")


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _read(path: str, device: Any = "cpu") -> dict[str, Any]:
    """Every tensor of the drafter's safetensors files, moved once onto ``device`` (the model's):
    the same tensors are loaded and then held against what the model holds."""
    from safetensors import safe_open

    out: dict[str, Any] = {}
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{path}: no .safetensors files")
    for f in files:
        with safe_open(f, "pt", device=str(device)) as sf:
            for k in sf.keys():
                out[k] = sf.get_tensor(k)
    return out


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _sync(device: Any) -> float:
    """The time, once the device has finished what it was given (the phases' seconds are real)."""
    import time

    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)
    return time.monotonic()


def _param_name(name: str, spec: dict[str, Any]) -> tuple[str, str | None]:
    """The parameter name a file tensor lands in before the prefix, and its shard id in a stacked
    parameter (the release table's loader rules)."""
    if name == "d2t":
        return spec.get("d2t_to", "d2t"), None
    for old, new in spec.get("renames", []):
        if old in name:
            name = name.replace(old, new)
    for stacked, part, shard in spec.get("stacked", []):
        if part in name:
            return name.replace(part, stacked), shard
    return name, None


def _expected(files: Any, spec: dict[str, Any], params: set[str]) -> dict[str, list[tuple[str, str | None]]]:
    """Each parameter the file fills, and its file tensors in shard order. A name is looked up as it
    is, else with the loader's prefix (lm_head never takes one)."""
    order = {str(shard): i for i, (_, _, shard) in enumerate(spec.get("stacked", []))}
    out: dict[str, list[tuple[str, str | None]]] = {}
    for name in files:
        p, shard = _param_name(name, spec)
        if p not in params and not p.startswith(tuple(spec.get("no_prefix", []))):
            p = spec.get("prefix", "") + p
        out.setdefault(p, []).append((name, shard))
    for parts in out.values():
        parts.sort(key=lambda x: order.get(str(x[1]), -1))
    return out


def _never(name: str, spec: dict[str, Any]) -> bool:
    return any(s in name for s in spec.get("never_loaded", []))


def _shared(draft: Any, target: Any) -> set[str]:
    """The draft model's parameters that are the target's own tensor objects (vLLM puts the target's
    embed_tokens or lm_head module in the drafter's place when it shares them)."""
    theirs = {id(p) for p in target.parameters()}
    return {n for n, p in draft.named_parameters(remove_duplicate=False) if id(p) in theirs}


def _plan(files: dict[str, Any], draft: Any, target: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Which file tensors to load. A parameter the draft model shares with the target is never
    written: a file whose values differ there refuses the swap (the target is never touched)."""
    import torch

    params = dict(draft.named_parameters(remove_duplicate=False))
    shared = _shared(draft, target) if target is not None else set()
    expected = _expected(files, spec, set(params))
    skip: list[str] = []
    refused = None
    for pname, parts in expected.items():
        names = [n for n, _ in parts]
        if any(_never(n, spec) for n in names):
            skip += names
        elif pname in shared:
            got = torch.cat([files[n].reshape(-1) for n in names]).to(params[pname].dtype)
            if torch.equal(got.cpu(), params[pname].detach().reshape(-1).cpu()):
                skip += names  # the target's own values: nothing to load
            else:
                refused = f"{pname} is the target's own tensor in the running drafter, and this drafter's differs"
        elif pname not in params:
            refused = f"{names[0]}: the running drafter has no parameter {pname}"
    return {"skip": skip, "refused": refused, "expected": expected}


def _read_back(
    draft: Any, files: dict[str, Any], expected: dict[str, list[tuple[str, str | None]]], skip: list[str]
) -> dict[str, Any]:
    """Each loaded parameter held against the file's tensors on the device (ckpt_digest.check_param):
    ``checks`` is {parameter: [how, holds]}, ``numel`` its size as held."""
    from ckpt_digest import check_param  # type: ignore[import-not-found]

    params = dict(draft.named_parameters(remove_duplicate=False))
    modules = dict(draft.named_modules())
    world = _world()
    checks: dict[str, list[Any]] = {}
    numel: dict[str, int] = {}
    for p, parts in expected.items():
        if p not in params or parts[0][0] in skip or not all(n in files for n, _ in parts):
            continue
        mod = modules.get(p.rsplit(".", 1)[0]) if "." in p else None
        sharded = world > 1 and int(getattr(mod, "tp_size", 1) or 1) > 1
        dev = params[p].device
        how, ok = check_param(params[p], [files[n].to(dev) for n, _ in parts], mod, sharded)
        checks[p] = [how, ok]
        numel[p] = int(params[p].numel())
    return {"checks": checks, "numel": numel}


class VllmDrafterSwap:
    """vLLM worker extension: ``ckpt_swap(path)`` loads a drafter into the running draft model and
    holds it against the file; ``ckpt_target_digest()`` digests the target model's weights."""

    def _models(self) -> tuple[Any, Any]:
        runner: Any = getattr(self, "model_runner", self)
        return runner.get_draft_model(), runner.get_model()

    def ckpt_swap(self, path: str) -> str:
        spec = _spec()
        draft, target = self._models()
        device = next(draft.parameters()).device
        t0 = _sync(device)
        files = _read(path, device)
        t1 = _sync(device)
        plan = _plan(files, draft, target, spec)
        out: dict[str, Any] = {"rank": _rank(), "path": path, "skipped": plan["skip"], "refused": plan["refused"]}
        if plan["refused"] is None:
            self._load(draft, [(n, t) for n, t in files.items() if n not in plan["skip"]], spec)
            t2 = _sync(device)
            out["loaded"] = [n for n in files if n not in plan["skip"]]
            out["maps_replaced"] = int("d2t" in out["loaded"])  # draft_id_to_target_id is read at every step
            out |= _read_back(draft, files, plan["expected"], plan["skip"])
            t3 = _sync(device)
            out["timings"] = {"read": t1 - t0, "update": t2 - t1, "check": t3 - t2}
            out["bytes"] = sum(int(t.numel() * t.element_size()) for t in files.values())
        return json.dumps(out)

    def _load(self, draft: Any, weights: list[tuple[str, Any]], spec: dict[str, Any]) -> None:
        """load_weights as at start-up: a layer whose weights were processed into a kernel format
        after loading (vLLM's CPU linear layers are) is restored first and processed again after
        (the table's ``reload``: vLLM's own layerwise in-place reload)."""
        import importlib

        r = spec.get("reload")
        if not r:
            draft.load_weights(weights)
            return
        mod = importlib.import_module(r["module"])
        cfg: Any = getattr(self, "model_runner", self)
        for attr in r["config"]:
            cfg = getattr(cfg, attr)
        getattr(mod, r["begin"])(draft)
        try:
            draft.load_weights(weights)
        finally:
            getattr(mod, r["end"])(draft, cfg)

    def ckpt_target_digest(self) -> str:
        """ckpt_digest.model_digest of the target model, with this worker's rank and the seconds it took."""
        from ckpt_digest import model_digest  # type: ignore[import-not-found]

        _, target = self._models()
        device = next(target.parameters()).device
        t0 = _sync(device)
        got = model_digest(target)
        return json.dumps({"rank": _rank(), "class": type(target).__name__, **got, "seconds": _sync(device) - t0})


def sglang_load_drafter(model: Any, named_tensors: list) -> None:
    """SGLang custom weight loader: called for the draft model and then for the target with the same
    payload. The payload is one (SWAP_TAG, JSON) pair: the op (``swap``, the default, or
    ``target_digest``), the drafter's path for a swap, and where to write this rank's answer. A swap
    is done on the draft model's call (the target's returns at once); a target digest on the
    target's call (the draft model's returns at once)."""
    spec = _spec()
    (tag, raw), *_ = named_tensors
    if tag != SWAP_TAG:
        return
    req = json.loads(raw if isinstance(raw, str) else bytes(raw.cpu().tolist()).decode())
    is_draft = type(model).__name__ in spec.get("draft_classes", [])
    op = req.get("op", "swap")
    rank = _rank()
    if op == "target_digest":
        if is_draft:
            return
        out = _sglang_target_digest(model)
    elif not is_draft:
        return
    else:
        try:
            out = _sglang_swap(model, req["path"], spec)
        except Exception as e:  # the answer says what failed; the server keeps running
            out = {"refused": f"{type(e).__name__}: {e}"}
        out |= {"path": req["path"]}
    out |= {"rank": rank}
    dest = req["answer"].replace("{rank}", str(rank))
    tmp = f"{dest}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, dest)


def _sglang_target_digest(model: Any) -> dict[str, Any]:
    from ckpt_digest import model_digest  # type: ignore[import-not-found]

    device = next(model.parameters()).device
    t0 = _sync(device)
    try:
        got = model_digest(model)
    except Exception as e:  # said in the answer: the check reads "not checked" and why
        return {"op": "target_digest", "refused": f"{type(e).__name__}: {e}"}
    return {"op": "target_digest", "class": type(model).__name__, **got, "seconds": _sync(device) - t0}


def _sglang_workers(model: Any, spec: dict[str, Any]) -> list[Any]:
    """The draft workers that hold this model (found among live objects, by the table's class names)."""
    import gc

    classes = set(spec.get("worker_classes", []))
    found = []
    for obj in gc.get_objects():
        if type(obj).__name__ in classes:
            holder: Any = obj
            for attr in spec.get("worker_model_path", []):
                holder = getattr(holder, attr, None)
            if holder is model:
                found.append(obj)
    return found


def _sglang_swap(model: Any, path: str, spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    device = next(model.parameters()).device
    t0 = _sync(device)
    files = _read(path, device)
    t1 = _sync(device)
    d2t = files.pop("d2t", None)
    files.pop("t2d", None)
    plan = _plan(files, model, None, spec)  # SGLang shares embed_tokens with the target: never_loaded
    out: dict[str, Any] = {"skipped": plan["skip"], "refused": plan["refused"], "maps_replaced": 0}
    if plan["refused"] is not None:
        return out
    if d2t is not None:
        hot = d2t.to(device=device, dtype=torch.long) + torch.arange(len(d2t), device=device)
        workers = _sglang_workers(model, spec)
        for w in workers:
            cached = getattr(w, spec["worker_map_attr"])
            if cached.shape != hot.shape:
                out["refused"] = f"the running map has {cached.shape[0]} slots, this drafter {hot.shape[0]}"
                return out
        for w in workers:
            getattr(w, spec["worker_map_attr"]).copy_(hot)
        if getattr(model, spec.get("model_map_attr", ""), None) is not None:
            getattr(model, spec["model_map_attr"]).copy_(hot.to(getattr(model, spec["model_map_attr"]).device))
        out["maps_replaced"] = len(workers)
    loaded = [(n, t) for n, t in files.items() if n not in plan["skip"]]
    model.load_weights(iter(loaded))
    t2 = _sync(device)
    out["loaded"] = [n for n, _ in loaded]
    out |= _read_back(model, files, plan["expected"], plan["skip"])
    t3 = _sync(device)
    out["timings"] = {"read": t1 - t0, "update": t2 - t1, "check": t3 - t2}
    out["bytes"] = sum(int(t.numel() * t.element_size()) for t in files.values()) + (
        int(d2t.numel() * d2t.element_size()) if d2t is not None else 0
    )
    return out
