"""Text for quantized drafters: inspect's quantization block and ``ckpt quantize``'s report."""

from __future__ import annotations

from typing import Any

from ckpttools.cli.output import human_bytes, table

__all__ = ["render_quantization", "render_quantize"]


def render_quantization(q: dict[str, Any] | None) -> list[str]:
    """inspect's lines for a quantized checkpoint (none for an unquantized one)."""
    if not q:
        return []
    grans = ", ".join(q["granularity"]) or "none"
    block = f", blocks {q['block'][0]}x{q['block'][1]}" if q.get("block") else ""
    ratio = q["bytes_on_disk"] / q["bytes_bf16"] if q["bytes_bf16"] else 0.0
    out = [
        f"quantization: {q['format'] or 'FP8 tensors without a quantization_config'} "
        f"({q['config_source'] or 'no config'}); per {grans}{block}",
        f"  {len(q['quantized'])} FP8 weights, {len(q['scales'])} scales, {len(q['unquantized'])} 2-D weights unquantized"
        + (f" (ignore: {', '.join(q['ignore'])})" if q["ignore"] else ""),
        f"  size on disk {human_bytes(q['bytes_on_disk'])} vs {human_bytes(q['bytes_bf16'])} in bf16 ({ratio:.2f}x)",
    ]
    rows = [
        [w["weight"], w["dtype"], w["granularity"] or "-", w["scale"] or "MISSING", str(w["scale_shape"] or "-")]
        for w in q["quantized"]
    ]
    if rows:
        out.append(table(rows, ("quantized weight", "dtype", "per", "scale", "scale shape")))
    out += [f"  problem: {p['id']} {p['location']}: {p['message']}" for p in q["problems"]]
    return out


def render_quantize(r: Any) -> str:
    """``ckpt quantize``'s report."""
    d = r.to_dict() if hasattr(r, "to_dict") else r
    out = [
        f"wrote {d['output']} ({d['scheme']}, compressed-tensors, for {d['engine_release']})",
        f"  {len(d['quantized'])} weights quantized, {len(d['kept'])} tensors kept as they were",
        f"  {human_bytes(d['bytes_before'])} -> {human_bytes(d['bytes_after'])}; largest error of a dequantized "
        f"value {d['max_abs_error']:.3g}",
    ]
    val = d.get("validation") or {}
    if val:
        c = val.get("counts", {})
        out.append(f"  validated: {c.get('error', 0)} errors, {c.get('warning', 0)} warnings")
    return "\n".join(out)
