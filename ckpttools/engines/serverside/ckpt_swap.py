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

Every answer is a JSON string: what was loaded, what was skipped and why, each touched parameter's
sha256 as read back, and on which rank.
"""

from __future__ import annotations

import glob
import hashlib
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


def _read(path: str) -> dict[str, Any]:
    """Every tensor of the drafter's safetensors files, on the CPU."""
    from safetensors import safe_open

    out: dict[str, Any] = {}
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{path}: no .safetensors files")
    for f in files:
        with safe_open(f, "pt", device="cpu") as sf:
            for k in sf.keys():
                out[k] = sf.get_tensor(k)
    return out


def digest(t: Any) -> str:
    """sha256 of a tensor's bytes, as they lie in memory (row-major)."""
    import torch

    flat = t.detach().contiguous().reshape(-1).cpu()
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def checksum(params: dict[str, Any]) -> str:
    """A digest of a whole model's parameters: sha256 over each one's name, shape, dtype, and its
    sums of values and of squares, in float64 and in chunks (cheap on a GPU, no copy of the model)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(params):
        p = params[name].detach().reshape(-1)
        s = q = 0.0
        for chunk in p.split(1 << 24):
            c = chunk.to(torch.float64)
            s += float(c.sum())
            q += float((c * c).sum())
        h.update(f"{name}|{list(params[name].shape)}|{params[name].dtype}|{s!r}|{q!r}\n".encode())
    return h.hexdigest()


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


def _read_back(draft: Any, expected: dict[str, list[tuple[str, str | None]]], skip: list[str]) -> dict[str, Any]:
    params = dict(draft.named_parameters(remove_duplicate=False))
    mine = [p for p, parts in expected.items() if p in params and parts[0][0] not in skip]
    return {
        "digests": {p: digest(params[p]) for p in mine},
        "dtypes": {p: str(params[p].dtype) for p in mine},
        "numel": {p: int(params[p].numel()) for p in mine},
    }


class VllmDrafterSwap:
    """vLLM worker extension: ``ckpt_swap(path)`` loads a drafter into the running draft model,
    ``ckpt_target_checksum()`` and ``ckpt_draft_digests()`` read weights back."""

    def _models(self) -> tuple[Any, Any]:
        runner: Any = getattr(self, "model_runner", self)
        return runner.get_draft_model(), runner.get_model()

    def ckpt_swap(self, path: str) -> str:
        spec = _spec()
        draft, target = self._models()
        files = _read(path)
        plan = _plan(files, draft, target, spec)
        out: dict[str, Any] = {"rank": _rank(), "path": path, "skipped": plan["skip"], "refused": plan["refused"]}
        if plan["refused"] is None:
            self._load(draft, [(n, t) for n, t in files.items() if n not in plan["skip"]], spec)
            out["loaded"] = [n for n in files if n not in plan["skip"]]
            out["maps_replaced"] = int("d2t" in out["loaded"])  # draft_id_to_target_id is read at every step
            out |= _read_back(draft, plan["expected"], plan["skip"])
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

    def ckpt_target_checksum(self) -> str:
        draft, target = self._models()
        own = {n: p for n, p in target.named_parameters()}
        return json.dumps({"rank": _rank(), "target": checksum(own), "draft": checksum(dict(draft.named_parameters()))})


def sglang_load_drafter(model: Any, named_tensors: list) -> None:
    """SGLang custom weight loader: called for the draft model and then for the target with the same
    payload (the target is returned from at once). The payload is one (SWAP_TAG, JSON) pair: the
    drafter's path and where to write this rank's answer."""
    spec = _spec()
    if type(model).__name__ not in spec.get("draft_classes", []):
        return
    (tag, raw), *_ = named_tensors
    if tag != SWAP_TAG:
        return
    req = json.loads(raw if isinstance(raw, str) else bytes(raw.cpu().tolist()).decode())
    rank = _rank()
    try:
        out = _sglang_swap(model, req["path"], spec)
    except Exception as e:  # the answer says what failed; the server keeps running
        out = {"refused": f"{type(e).__name__}: {e}"}
    out |= {"rank": rank, "path": req["path"]}
    dest = req["answer"].replace("{rank}", str(rank))
    tmp = f"{dest}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, dest)


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

    files = _read(path)
    device = next(model.parameters()).device
    d2t = files.pop("d2t", None)
    files.pop("t2d", None)
    plan = _plan(files, model, None, spec)  # SGLang shares embed_tokens with the target: never_loaded
    out: dict[str, Any] = {"skipped": plan["skip"], "refused": plan["refused"], "maps_replaced": 0}
    if plan["refused"] is not None:
        return out
    if d2t is not None:
        hot = (d2t.to(torch.long) + torch.arange(len(d2t))).to(device)
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
    loaded = [(n, t.to(device)) for n, t in files.items() if n not in plan["skip"]]
    model.load_weights(iter(loaded))
    out["loaded"] = [n for n, _ in loaded]
    out |= _read_back(model, plan["expected"], plan["skip"])
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out
