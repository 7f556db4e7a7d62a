"""Human renderings of the library's result objects (the CLI's tables)."""

from __future__ import annotations

from typing import Any

from .output import human_bytes, human_count, table

__all__ = ["render_inspect"]

_CONFIG_ROWS = (
    "architectures", "hidden_size", "target_hidden_size", "vocab_size", "draft_vocab_size",
    "num_hidden_layers", "aux_layer_ids", "max_position_embeddings", "rope_theta", "rope_scaling",
    "torch_dtype",
)  # fmt: skip


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}={w}" for k, w in v.items())
    return str(v)


def render_inspect(r: Any) -> str:
    out = [f"{r.source}", f"  kind: {r.kind} ({r.kind_description})"]
    for e in r.evidence:
        out.append(f"    - {e}")
    if r.config is None:
        out.append("config: none (no config.json)")
    else:
        out.append("config:")
        src = r.config.get("sources", {})
        rows = []
        for k in _CONFIG_ROWS:
            v = r.config.get(k)
            if k == "draft_vocab_size" and r.config.get("draft_vocab_size_present") and v is None:
                v = "null (full vocabulary)"
            where = src.get(k, "")
            rows.append((k, _fmt(v), where if where and not where.startswith("$." + k) else ""))
        out.append(table(rows, ("field", "value", "from")))
        if r.context_length:
            out.append(f"  context length: {r.context_length}")
    out.append(
        f"weights: {r.num_tensors} tensors, {human_count(r.total_params)} params, "
        f"{human_bytes(r.total_bytes)} in {len(r.files)} file(s)"
    )
    out.append(table([(d, v["tensors"], human_count(v["params"]), human_bytes(v["bytes"]))
                      for d, v in sorted(r.by_dtype.items())], ("dtype", "tensors", "params", "bytes")))  # fmt: skip
    if len(r.files) > 1:
        out.append(f"  shards: {len(r.files)} ({r.files[0]['file']} ... {r.files[-1]['file']})")
    vm = r.vocab_mapping
    if vm:
        out.append("vocab mapping:")
        if "error" in vm:
            out.append(f"  unreadable: {vm['error']}")
        else:
            agree = {None: "no t2d", True: "t2d agrees with d2t", False: "t2d DISAGREES with d2t"}[vm["t2d_agrees"]]
            out.append(
                f"  Vd {vm['draft_vocab_size']} -> V {_fmt(vm['target_vocab_size'])}; {vm['order']} order; "
                f"d2t offsets [{vm['d2t_min']}, {vm['d2t_max']}]; target ids [{vm['target_id_min']}, "
                f"{vm['target_id_max']}]; {agree}" + ("; identity map" if vm["identity"] else "")
            )
            out.append(f"  dtypes: {_fmt(vm['dtypes'])}")
            for p in vm["problems"]:
                out.append(f"  {p['severity']}: {p['message']}")
    for n in r.notes:
        out.append(f"note: {n}")
    if r.tensors is not None:
        out.append(f"tensors ({len(r.tensors)}):")
        out.append(table([(t["name"], t["dtype"], "x".join(map(str, t["shape"])) or "scalar",
                           human_bytes(t["bytes"]), t["shard"]) for t in r.tensors],
                         ("name", "dtype", "shape", "size", "shard")))  # fmt: skip
    return "\n".join(out)
