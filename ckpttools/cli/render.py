"""Human renderings of the library's result objects (the CLI's tables)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpttools.cli.output import human_bytes, human_count, table
from ckpttools.cli.render_quant import render_quantization, render_quantize

if TYPE_CHECKING:
    from ckpttools.measuring.compare import CompareReport
    from ckpttools.ops.export import ExportReport
    from ckpttools.ops.fix import FixResult
    from ckpttools.ops.inspect import InspectReport
    from ckpttools.measuring.logs import LogsReport
    from ckpttools.ops.remap import RemapReport
    from ckpttools.ops.validate import ValidationReport
    from ckpttools.measuring.verify import VerifyReport
    from ckpttools.vocab.diff import BuildResult, VocabDiff

__all__ = [
    "render_inspect",
    "render_diff_vocab",
    "render_build",
    "render_validation",
    "render_fix",
    "render_remap",
    "render_export",
    "render_verify",
    "render_quantize",
]

_CONFIG_ROWS = (
    "architectures",
    "hidden_size",
    "target_hidden_size",
    "vocab_size",
    "draft_vocab_size",
    "num_hidden_layers",
    "aux_layer_ids",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "torch_dtype",
)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}={w}" for k, w in v.items())
    return str(v)


def hub_line(hub: dict[str, Any] | None) -> list[str]:
    """Which commit of a Hub repo was read, and what reading it cost."""
    if not hub:
        return []
    asked = f"@{hub['revision']}" if hub.get("revision") else ""
    return [
        f"  hub: {hub['repo']}{asked} at commit {hub['commit']}; read by range: {human_bytes(hub['range_bytes'])} "
        f"in {hub['range_requests']} request(s) (config and index through the Hugging Face cache)"
    ]


def render_inspect(r: InspectReport, all_tensors: bool = False) -> str:
    out = [f"{r.source}", f"  kind: {r.kind} ({r.kind_description})"]
    out += [f"    - {e}" for e in r.evidence]
    out += hub_line(r.hub)
    out += _inspect_config(r)
    if r.config_file:
        out.insert(1, "  a config file (no weights read)")
        return "\n".join(out + [f"note: {n}" for n in r.notes])
    out.append(
        f"weights: {r.num_tensors} tensors, {human_count(r.total_params)} params, "
        f"{human_bytes(r.total_bytes)} in {len(r.files)} file(s)"
    )
    dtypes = [
        (d, v["tensors"], human_count(v["params"]), human_bytes(v["bytes"])) for d, v in sorted(r.by_dtype.items())
    ]
    out.append(table(dtypes, ("dtype", "tensors", "params", "bytes")))
    if len(r.files) > 1:
        out.append(f"  shards: {len(r.files)} ({r.files[0]['file']} ... {r.files[-1]['file']})")
    out += _inspect_mapping(r.vocab_mapping)
    out += render_quantization(r.quantization)
    out += [f"note: {n}" for n in r.notes]
    if r.tensors is not None:
        out += _inspect_tensors(r.tensors, all_tensors)
    return "\n".join(out)


def _inspect_config(r: Any) -> list[str]:
    if r.config is None:
        return ["config: none (no config.json)"]
    src = r.config.get("sources", {})
    rows = []
    for k in _CONFIG_ROWS:
        v = r.config.get(k)
        if k == "draft_vocab_size" and r.config.get("draft_vocab_size_present") and v is None:
            v = "null (full vocabulary)"
        where = src.get(k, "")
        rows.append((k, _fmt(v), where if where and not where.startswith("$." + k) else ""))
    out = ["config:", table(rows, ("field", "value", "from"))]
    if r.context_length:
        out.append(f"  context length: {r.context_length}")
    return out


def _inspect_mapping(vm: dict[str, Any] | None) -> list[str]:
    if not vm:
        return []
    if "error" in vm:
        return ["vocab mapping:", f"  unreadable: {vm['error']}"]
    agree = {None: "no t2d", True: "t2d agrees with d2t", False: "t2d DISAGREES with d2t"}[vm["t2d_agrees"]]
    out = [
        "vocab mapping:",
        f"  Vd {vm['draft_vocab_size']} -> V {_fmt(vm['target_vocab_size'])}; {vm['order']} order; "
        f"d2t offsets [{vm['d2t_min']}, {vm['d2t_max']}]; target ids [{vm['target_id_min']}, "
        f"{vm['target_id_max']}]; {agree}" + ("; identity map" if vm["identity"] else ""),
        f"  dtypes: {_fmt(vm['dtypes'])}",
    ]
    return out + [f"  {p['severity']}: {p['message']}" for p in vm["problems"]]


def _inspect_tensors(tensors: list[dict[str, Any]], all_tensors: bool) -> list[str]:
    trows = tensors if all_tensors else group_tensor_rows(tensors)
    grouped = "" if all_tensors or len(trows) == len(tensors) else f", {len(trows)} rows (--all-tensors for each)"
    counted = any(t.get("count", 1) > 1 for t in trows)
    cells = [
        (
            t["name"],
            t["dtype"],
            "x".join(map(str, t["shape"])) or "scalar",
            human_bytes(t["bytes"]),
            t["shard"],
            *([f"x{t['count']:,}" if t.get("count", 1) > 1 else ""] if counted else []),
        )
        for t in trows
    ]
    head = ("name", "dtype", "shape", "size", "shard", *(["count"] if counted else []))
    return [f"tensors ({len(tensors)}{grouped}):", table(cells, head)]


def render_diff_vocab(d: VocabDiff) -> str:
    out = ["mappings:"]
    out.append(
        table(
            [
                (k, s["source"], f"{s['draft_vocab_size']:,}", _fmt(s["target_vocab_size"]), s["order"])
                for k, s in (("A", d.a), ("B", d.b))
            ],
            ("", "source", "Vd", "V", "order"),
        )
    )
    if d.target_vocab_note:
        out.append(f"note: {d.target_vocab_note}")
    if d.lm_head_scales:
        out.append(f"note: {d.lm_head_scales}")
    rows = [
        ("slots that agree (same token at the same draft id)", f"{d.slots_agree:,} of {d.slots_total:,}"),
        ("slots that differ", f"{d.slots_differ:,}"),
        ("tokens shared", f"{d.shared_tokens:,}"),
        ("tokens only in A", f"{d.only_a:,}"),
        ("tokens only in B", f"{d.only_b:,}"),
        ("Jaccard index", f"{d.jaccard:.4f}"),
        ("remap A -> B: rows carried", f"{d.remap_rows_carried:,}"),
        ("remap A -> B: rows to initialize", f"{d.remap_rows_to_initialize:,}"),
    ]
    if d.frequency:
        f = d.frequency
        rows += [
            ("token mass covered by A", f"{f['mass_a']:.2%}"),
            ("token mass covered by B", f"{f['mass_b']:.2%}"),
            ("mass only in A (lost moving A -> B)", f"{f['mass_only_a']:.2%}"),
            ("mass only in B (new to A's head)", f"{f['mass_only_b']:.2%}"),
        ]
    out.append(table(rows, ("measure", "value")))
    if d.differing_slots:
        out.append(f"first {len(d.differing_slots)} differing slots:")
        out.append(
            table(
                [(r["slot"], r["a"], _tok(r["a_token"]), r["b"], _tok(r["b_token"])) for r in d.differing_slots],
                ("slot", "A id", "A token", "B id", "B token"),
            )
        )
    for label, rows_ in (("only in A", d.only_a_tokens), ("only in B", d.only_b_tokens)):
        if rows_:
            out.append(
                f"tokens {label} (first {len(rows_)}): "
                + ", ".join(f"{r['id']}" + (f" {_tok(r['token'])}" if r["token"] is not None else "") for r in rows_)
            )
    out.append(f"verdict: {d.verdict}")
    return "\n".join(out)


def _tok(t: str | None) -> str:
    return "-" if t is None else repr(t)


def render_build(r: BuildResult) -> str:
    return (
        f"wrote {r.output}: Vd {r.draft_vocab_size:,} of V {r.target_vocab_size:,}, ascending order; "
        f"covers {r.mass_covered:.2%} of the token mass ({r.tokens_seen:,} distinct tokens seen"
        + (f"; {r.zero_count_tokens:,} chosen tokens were never seen" if r.zero_count_tokens else "")
        + ")"
    )


def render_validation(r: ValidationReport | _Val) -> str:
    c = r.counts()
    head = f"{r.drafter}" + (f" against {r.target}" if r.target else "") + f" (checked: {', '.join(r.checked)})"
    out = [head, *hub_line(r.hub)]
    if r.engine_release:
        out.append(f"engine: {r.engine_release} ({r.engine_release_from})")
    if r.load_plan:
        out += render_load_plan(r.load_plan)
    for sev in ("error", "warning", "info"):
        items = [f for f in r.findings if f.severity == sev]
        if not items:
            continue
        out.append(f"{sev.upper()}S ({len(items)}):" if sev != "info" else f"INFO ({len(items)}):")
        for f in items:
            out.append(f"  [{f.id}] {f.location}: {f.message}")
            if f.hint:
                out.append(f"      fix: {f.hint}")
    verdict = "OK: no errors" if r.ok else f"FAILED: {c['error']} error(s)"
    out.append(f"{verdict}, {c['warning']} warning(s), {c['info']} note(s)")
    return "\n".join(out)


def render_load_plan(plan: dict[str, Any]) -> list[str]:
    """The load plan as a reader checks it: the class, then each tensor's fate, then each parameter's
    source (those not from the file first)."""
    e = plan["engine"]
    out = [f"load plan ({e['name']}=={e['release']}): builds {plan['class'] or 'nothing'} ({plan['class_source']})"]
    for t in plan["tensors"]:
        where = f" -> {t['param']}" if t.get("param") and t.get("param") != t["name"] else ""
        why = f"  ({t['reason']})" if t.get("reason") else ""
        out.append(f"  tensor  {t['fate']:<8} {t['name']}{where}{why}")
    for p in sorted(plan["params"], key=lambda p: (p["source"] == "file", p["name"])):
        init = f" = {p['init']}" if p.get("init") else f" <- {p['derived_from']}" if p.get("derived_from") else ""
        out.append(f"  param   {p['source']:<11} {p['name']}{init}" + ("" if p.get("used", True) else "  (never read)"))
    out += [f"  cast    {c}" for c in plan.get("casts", [])] + [f"  switch  {s}" for s in plan.get("switches", [])]
    return out


def render_fix(r: FixResult) -> str:
    out = [f"wrote {r.output}" + (f" (original kept at {r.backup})" if r.backup else "")]
    out.append(f"changes ({len(r.changes)}):" if r.changes else "changes: none needed")
    out += [f"  - {c}" for c in r.changes]
    if r.unfixed:
        out.append("not fixable here:")
        out += [f"  - {u}" for u in r.unfixed]
    out.append("validate on the output:")
    out.append(render_validation(r.after))
    return "\n".join(out)


def render_remap(r: RemapReport) -> str:
    rows = [
        ("source", r.source),
        ("destination mapping", r.destination),
        ("draft vocab", f"{r.draft_vocab_size_before:,} -> {r.draft_vocab_size_after:,}"),
        ("target vocab", f"{_fmt(r.vocab_size_before)} -> {_fmt(r.vocab_size_after)}"),
        ("lm_head rows carried (trained rows kept)", f"{r.rows_carried:,}"),
        ("lm_head rows filled", f"{r.rows_filled:,} with {r.fill}"),
        ("embed_tokens", r.embed_tokens),
        ("other tensors copied byte for byte", f"{r.tensors_copied}"),
        ("written", f"{human_bytes(r.bytes_written)} in {r.seconds:.2f} s"),
    ]
    if r.token_match:
        tm = r.token_match
        rows.insert(
            4,
            (
                "tokens matched by bytes",
                f"{tm['exact_matches']:,} exact, {tm['unmatched']:,} unmatched "
                f"({tm['source_style']} -> {tm['target_style']})",
            ),
        )
    if r.token_mass:
        m = r.token_mass
        rows += [
            ("token mass: new mapping covers", f"{m['covered_by_new_mapping']:.2%}"),
            ("token mass: on carried rows", f"{m['covered_by_carried_rows']:.2%}"),
            ("token mass: on filled rows", f"{m['covered_by_filled_rows']:.2%}"),
        ]
    width = max(len(k) for k, _ in rows)
    return f"wrote {r.output}\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def render_export(r: ExportReport) -> str:
    out = [
        f"wrote {r.output}" if r.output else f"REJECTED: nothing written (export of {r.source})",
        f"  source layout: {r.source_flavor}; format: {r.format}; dtype: {r.dtype}",
    ]
    for title, items in (
        ("renamed", [f"{a} -> {b}" for a, b in r.renamed]),
        ("dropped", [f"{a} ({b})" for a, b in r.dropped]),
        ("cast", r.cast),
        ("built", r.built),
        ("config", r.config_changes),
        ("notes", r.notes),
    ):
        if items:
            out.append(f"  {title} ({len(items)}):")
            out += [f"    - {i}" for i in items]
    if r.output:
        out.append(f"  {r.tensors} tensors, {human_bytes(r.bytes_written)} in {r.seconds:.2f} s")
    if r.validation:
        out.append("validate on the export:")
        out.append(render_validation(_Val(r.validation)))
    return "\n".join(out)


class _Val:
    """A ValidationReport view over its dict (for rendering a report carried as data)."""

    def __init__(self, d: dict[str, Any]) -> None:
        from ckpttools.ops.validate import Finding

        self.drafter, self.target, self.checked, self.ok = d["drafter"], d["target"], d["checked"], d["ok"]
        self.findings = [Finding(**f) for f in d["findings"]]
        self._counts = d["counts"]
        self.hub: dict[str, Any] | None = d.get("hub")
        self.engine_release: str | None = d.get("engine_release")
        self.engine_release_from: str | None = d.get("engine_release_from")
        self.load_plan: dict[str, Any] | None = d.get("load_plan")

    def counts(self) -> dict[str, int]:
        return self._counts


def render_verify(r: VerifyReport) -> str:
    srv = ", ".join(f"{k}={v}" for k, v in r.server.items() if v is not None)
    out = [
        (f"{r.engine} at {r.url}" if r.url else f"{r.engine} (offline, no server)") + (f" ({srv})" if srv else ""),
        f"  requests: {r.completed} completed, {r.failed} failed, of {r.num_prompts}",
    ]
    if r.accept_length is not None:
        out.append(f"  accept length (tokens per verify step, engine convention): {r.accept_length:.3f}")
        out.append(f"  accepted drafts per step (bonus token not counted):       {r.accepted_drafts_per_step:.3f}")
        if r.accept_length_ci95:
            lo, hi = r.accept_length_ci95
            out.append(f"  per-request 95% interval of the mean: [{lo:.3f}, {hi:.3f}]")
        if r.per_request:
            q = r.per_request
            out.append(
                f"  per request: min {q['min']:.2f}  p25 {q['p25']:.2f}  median {q['median']:.2f}  "
                f"p75 {q['p75']:.2f}  max {q['max']:.2f}  (n={q['n']})"
            )
        if r.per_position_acceptance:
            out.append(
                "  acceptance by draft position: "
                + "  ".join(f"{i + 1}: {a:.2f}" for i, a in enumerate(r.per_position_acceptance))
            )
        if r.steps_estimate and len(r.steps_estimate["steps"]) > 1:
            est = r.steps_estimate
            pairs = ", ".join(f"{k}: {a:.2f}" for k, a in zip(est["steps"][:-1], est["accept_length"][:-1]))
            out.append(f"  estimated for fewer steps (from this run's per-position acceptance): {pairs}")
        out.append(f"  computed from: {r.fields_used}")
    if r.server_avg_accept_length is not None:
        out.append(f"  server's own avg_spec_accept_length (/server_info): {r.server_avg_accept_length:.3f}")
    out += _server_log(r.server_log)
    if r.log_accept_lens:
        out.append(f"  server log 'accept len' lines: {len(r.log_accept_lens)}, last {r.log_accept_lens[-1]:.2f}")
    if r.output_tokens_per_s is not None:
        out.append(f"  output: {r.output_tokens} tokens, {r.output_tokens_per_s:.1f} tokens/s")
    if r.latency_s:
        out.append(
            f"  latency: mean {r.latency_s['mean']:.3f} s, p50 {r.latency_s['p50']:.3f} s, "
            f"p95 {r.latency_s['p95']:.3f} s"
        )
    if r.baseline:
        b = r.baseline
        where = b.get("url") or "launched"
        out.append(
            f"  baseline {where}: {b.get('output_tokens_per_s') or 0:.1f} tokens/s"
            + (f" ({b['error']})" if b.get("error") else "")
        )
    out += _categories(r) + _levels(r) + _context(r) + _sweep(r) + _bars(r)
    for e in r.errors[:5]:
        out.append(f"  error: {e}")
    out.append(f"verdict: {r.verdict}")
    return "\n".join(out)


def _server_log(sl: dict[str, Any] | None) -> list[str]:
    """verify --host --log: the server log's lifetime figure, its events, its last segments."""
    if not sl:
        return []
    fig = "-" if sl.get("accept_length") is None else f"{sl['accept_length']:.3f}"
    out = [
        f"  server's log ({', '.join(sl['files'])}), its lifetime: accept length {fig} "
        f"({'exact' if sl.get('exact') else 'estimated'}, {sl.get('window_count', 0)} windows, {sl.get('source')})"
    ]
    for e in sl.get("events", [])[:5]:
        out.append(f"    {e['kind']} at {e.get('time') or '-'}: {e['text'][:100]}")
    segs = sl.get("segments") or []
    if sl.get("segment_count", 0) > 1:
        out.append(f"    split at each weight update: {sl['segment_count']} segments, the last {min(len(segs), 5)}:")
        out += [f"      {s['verdict'][:150]}" for s in segs[-5:]]
    return out


def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "-"


def _categories(r: Any) -> list[str]:
    cats = r.categories or {}
    if len(cats) < 2:
        return []
    out = ["  by category (accept length, 95% interval, tokens/s per request):"]
    for k, v in cats.items():
        flag = "  BELOW the overall interval" if v.get("below_overall") else ""
        out.append(
            f"    {k:<14} {_f(v['accept_length'])}  {_ci(v['accept_length_ci95']):<16} "
            f"{_f(v['tokens_per_s'], '.1f'):>8} tok/s  n={v['n']}{flag}"
        )
    return out


def _levels(r: Any) -> list[str]:
    if not r.concurrency_levels:
        return []
    out = ["  by concurrency (accept length, figures, tokens/s, latency p50/p90/p99 s):"]
    for v in r.concurrency_levels:
        lat = v.get("latency_s") or {}
        out.append(
            f"    c={v['concurrency']:<4} {_f(v['accept_length'])}  {v['figures']:<11} "
            f"{_f(v['output_tokens_per_s'], '.1f'):>8} tok/s  "
            f"{_f(lat.get('p50'), '.3f')}/{_f(lat.get('p90'), '.3f')}/{_f(lat.get('p99'), '.3f')}"
        )
    return out


def _context(r: Any) -> list[str]:
    if not r.context:
        return []
    c = r.context
    out = [
        f"  by context length (target context {c.get('target_context') or 'unknown'}, drafter "
        f"max_position_embeddings {c.get('drafter_max_position_embeddings') or 'not given'}"
        + (f", rope {c['drafter_rope']}" if c.get("drafter_rope") else "")
        + "):"
    ]
    for b in c["bins"]:
        past = "  past the drafter's context" if b.get("past_drafter_context") else ""
        if b.get("skipped"):
            out.append(f"    {b['tokens']:>7} tokens: skipped ({b['skipped']})")
        else:
            out.append(f"    {b['tokens']:>7} tokens: {_f(b['accept_length'])}  {_ci(b['accept_length_ci95'])}{past}")
    return out


def _sweep(r: Any) -> list[str]:
    if not r.sweep:
        return []
    sw = r.sweep
    out = [f"  sweep, ranked by {sw['ranked_by']}:"]
    order = sw["ranking"] + [i for i in range(len(sw["settings"])) if i not in sw["ranking"]]
    for rank, i in enumerate(order, 1):
        e = sw["settings"][i]
        s = ",".join(f"{k}={v}" for k, v in e["setting"].items())
        if e.get("output_tokens_per_s"):
            tail = f"  ({e['status']}: {e['stopped_early']})" if e.get("stopped_early") else ""
            out.append(
                f"    {rank}. {s:<32} accept {_f(e['accept_length'])}  {_f(e['output_tokens_per_s'], '.1f')} tok/s"
                f"  speed-up {_f(e.get('speedup'))}x{tail}"
            )
        else:
            out.append(f"    -  {s:<32} {e['status']}: {e.get('error')}")
    if sw.get("launch_commands"):
        out.append(f"  best setting {sw['best']}; launch it with:")
        out += [f"    {k}: {v}" for k, v in sw["launch_commands"].items()]
    return out


def _bars(r: Any) -> list[str]:
    """Compact bars for the figures --plot draws."""
    from ckpttools.measuring.plot import panels

    out = []
    for title, labels, values, _ in panels(r):
        top = max(values) or 1.0
        out.append(f"  {title}:")
        w = max(len(x) for x in labels)
        out += [f"    {lab:>{w}} {'█' * max(1, round(20 * v / top))} {v:.2f}" for lab, v in zip(labels, values)]
    return out


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def _ranges(values: set[int]) -> str:
    """{0..60} for a run, {1,3,5} or {0..2,7} otherwise."""
    vs = sorted(values)
    parts, start, prev = [], vs[0], vs[0]
    for v in vs[1:] + [None]:  # type: ignore[list-item]
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}..{prev}")
        if v is not None:
            start = prev = v
    return "{" + ",".join(parts) + "}"


def group_tensor_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of repeated layers folded into one: every numeric path component becomes the set
    of values seen, for tensors of the same dtype and shape, e.g.
    ``model.layers.{0..60}.mlp.experts.{0..255}.gate_proj.weight`` with its count and bytes."""
    groups: dict[tuple[str, str, tuple[int, ...]], dict[str, Any]] = {}
    for t in rows:
        pattern = _INDEX.sub("#", t["name"])
        key = (pattern, t["dtype"], tuple(t["shape"]))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"rows": [], "indices": None}
        g["rows"].append(t)
        idx = [int(x) for x in _INDEX.findall(t["name"])]
        g["indices"] = [set() for _ in idx] if g["indices"] is None else g["indices"]
        for pos, v in enumerate(idx):
            g["indices"][pos].add(v)
    out = []
    for (pattern, dtype, shape), g in groups.items():
        members = g["rows"]
        if len(members) == 1:
            out.append(members[0])
            continue
        it = iter(g["indices"])
        name = re.sub("#", lambda _m: _ranges(next(it)), pattern)
        shards = {m["shard"] for m in members}
        out.append(
            {
                "name": name,
                "dtype": dtype,
                "shape": list(shape),
                "bytes": sum(m["bytes"] for m in members),
                "shard": next(iter(shards)) if len(shards) == 1 else f"{len(shards)} files",
                "count": len(members),
            }
        )
    return out


def render_logs(r: LogsReport, show: int = 20) -> str:
    """``ckpt logs``: engine and release, the windows (the first and last ``show``), events, totals, verdict."""
    rel = r.release or "release not named"
    out = [f"{r.engine or 'no engine recognised'} ({rel}; {r.release_source or '-'})"]
    out.append(f"  read: {', '.join(r.files)}: {r.lines} lines, {human_bytes(r.bytes)}; {r.run_count} run(s)")
    last = -1
    for run in r.runs:
        if run["index"] > last + 1:
            out.append(f"  ... runs {last + 1} to {run['index'] - 1} not listed ({r.run_count} runs in all)")
        last = run["index"]
        out.append(
            f"  run {run['index']} from {run.get('time') or '-'}: target {run.get('target_class') or '-'}, "
            f"drafter {run.get('drafter_class') or '-'}, {run.get('window_count', 0)} windows, accept length "
            f"{_f(run.get('accept_length'))}" + (f", ended by: {run['ended_by'][:120]}" if run.get("ended_by") else "")
        )
    out += _logs_segments(r, show)
    out += _logs_windows(r, show)
    if r.events:
        out.append("  events:")
        out += [f"    {e.get('time') or '-'}  {e['kind']:16s} {e['text'][:140]}" for e in r.events[: max(show, 1) * 2]]
    out.append(f"  accept length: {r.convention}")
    if r.accept_length is not None:
        every = " (every segment together: the segments above are each drafter's own)" if r.segment_count > 1 else ""
        out.append(
            f"    overall: {r.accept_length:.3f} ({r.accepted_drafts_per_step:.3f} accepted drafts per step){every}"
        )
        out.append(f"    {r.weighting}")
        if r.accept_length_ci95:
            out.append(
                f"    per-request 95% interval of the mean: [{r.accept_length_ci95[0]:.3f}, {r.accept_length_ci95[1]:.3f}]"
            )
        if r.windows_accept_length is not None and r.per_request:
            out.append(f"    decode windows give {r.windows_accept_length:.3f} (estimated)")
        if r.per_position_acceptance:
            out.append(
                "    acceptance by draft position: "
                + "  ".join(f"{i + 1}: {a:.3f}" for i, a in enumerate(r.per_position_acceptance))
            )
    for k, v in r.skipped.items():
        out.append(f"  skipped: {v} {k}")
    out.append(f"verdict: {r.verdict}")
    return "\n".join(out)


def _logs_segments(r: Any, show: int) -> list[str]:
    """The segments (more than one: the log split at weight updates), the first and last ``show``."""
    from ckpttools.measuring.logs_segments import label

    ss = r.segments
    if len(ss) <= 1:
        return []
    show = max(show, 1)
    rows = ss if len(ss) <= 2 * show else ss[:show] + [None] + ss[-show:]
    out = [f"  segments: {r.segment_count} (the log split at each weight update; each its own figures)"]
    for s in rows:
        if s is None:
            out.append(f"    ... {r.segment_count - 2 * show} more segments (all in --json)")
            continue
        where = f"lines {s['first_line']}-{s['last_line']}"
        if s["last_file"] != s["file"]:
            where = f"{s['file']}:{s['first_line']} to {s['last_file']}:{s['last_line']}"
        fig = (
            "no figures"
            if s["accept_length"] is None
            else (
                f"accept length {s['accept_length']:.2f} ({'exact' if s['exact'] else 'estimated'}, "
                f"{s['window_count']} windows" + (f", {s['request_count']} requests)" if s["request_count"] else ")")
            )
        )
        mark = {True: ", PASS", False: ", FAIL", None: ""}[s["passed"]]
        out.append(f"    {label(s)[:110]}, {where}, from {s['time'] or '-'}: {fig}{mark}")
    return out


def _logs_windows(r: Any, show: int) -> list[str]:
    if not r.windows or show == 0:
        return []
    ws = r.windows
    rows = ws if len(ws) <= 2 * show else ws[:show] + [None] + ws[-show:]
    stride = f" (each row {r.window_stride} windows merged)" if r.window_stride > 1 else ""
    out = [
        f"  windows: {r.window_count}{stride}",
        "    time                 accept len  rate   running  tok/s     per position",
    ]
    for w in rows:
        if w is None:
            out.append(f"    ... {len(ws) - 2 * show} more")
            continue
        pos = " ".join(f"{p:.2f}" for p in w["per_position"]) if w["per_position"] else ""
        out.append(
            f"    {w['time'] or '-':20s} {w['accept_length']:10.2f}  {_f(w['accept_rate']):5s}  "
            f"{_f(w['running_requests'], '.0f'):7s}  {_f(w['throughput'], '.1f'):8s}  {pos}"
        )
    return out


def _plan_source(s: dict[str, Any]) -> str:
    kind = s["kind"]
    if kind in ("copy", "cast"):
        how = "copied from" if kind == "copy" else f"cast from {s['from_dtype']},"
        return f"{how} {s['tensor']} ({Path(s['file']).name} @ {s['offset']:,})"
    if kind == "gather":
        parts = [f"{p['rows']:,} rows of {p['tensor']} ({Path(p['file']).name})" for p in s["rows_from"] if p["rows"]]
        if s["rows_filled"]:
            parts.append(f"{s['rows_filled']:,} filled")
        return "gathered: " + ", ".join(parts) + (" (cast)" if s["cast"] else "")
    return {"memory": "computed while planning", "hole": "a hole (reads as zeros)"}.get(kind, kind)


def render_plan(d: dict[str, Any]) -> str:
    """``--dry-run``: what an operation would write (WritePlan.describe()), and that nothing was written."""
    b = d["bytes"]
    what = "one file" if d["layout"] == "file" else "a checkpoint directory"
    kinds = [("copied", "copy"), ("gathered", "gather"), ("cast", "cast"), ("from memory", "memory")]
    split = ", ".join(f"{human_bytes(b[k])} {name}" for name, k in kinds if b[k])
    out = [f"dry run: {d['operation']} would write {d['output']} ({what}); nothing was written"]
    out.append(f"  {len(d['tensors'])} tensors, {human_bytes(b['total'])}" + (f": {split}" if split else ""))
    width = max((len(t["name"]) for t in d["tensors"]), default=0)
    for t in d["tensors"]:
        shape = "x".join(map(str, t["shape"])) or "scalar"
        out.append(f"    {t['name'].ljust(width)}  {t['dtype']:<5} [{shape}]  {_plan_source(t['source'])}")
    if d["config_diff"]:
        out.append("  config.json changes:")
        out += [f"    {c['key']}: {c['before']!r} -> {c['after']!r}" for c in d["config_diff"]]
    elif d["layout"] == "directory":
        out.append("  config.json: unchanged")
    kept = [s["name"] for s in d["side_files"] if s["kept"] and s["why"] is None]
    made = [f"{s['name']} ({s['why']})" for s in d["side_files"] if s["kept"] and s["why"] is not None]
    quiet = ("written anew", "the source's weights (read as tensors)")
    skipped = [f"{s['name']} ({s['why']})" for s in d["side_files"] if not s["kept"] and s["why"] not in quiet]
    if kept:
        out.append(f"  side files copied: {', '.join(kept)}")
    if made:
        out.append(f"  side files made: {', '.join(made)}")
    if skipped:
        out.append(f"  side files skipped: {', '.join(skipped)}")
    if d["check"]:
        out.append(f"  check before the rename: {d['check']}")
    for r in d["reads"]:
        out.append(f"  planning read: {r}")
    return "\n".join(out)


def render_compare(r: CompareReport) -> str:
    """Several drafters against one target: one line each, how it was put in place, and the checks."""
    starts = f"{r.server_starts} server start{'s' if r.server_starts != 1 else ''}"
    tp = f", TP {r.tp}" if r.tp != 1 else ""
    out = [
        f"{r.engine} ({r.release or 'release not known'}{tp}), target {r.target}: {len(r.drafters)} drafters, {starts}"
    ]
    width = max((len(e["drafter"]) for e in r.drafters), default=0)
    for e, rep in zip(r.drafters, r.reports):
        al = "-" if rep.accept_length is None else f"{rep.accept_length:.3f}"
        ci = rep.accept_length_ci95
        ci_s = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        tps = "" if rep.output_tokens_per_s is None else f", {rep.output_tokens_per_s:.1f} tok/s"
        sw = e["swap"]
        t = sw.get("timings") or {}
        phases = ", ".join(f"{k.replace('_', '-')} {t[k]:.2f}" for k in ("read", "update", "read_back") if k in t)
        how = (
            f"swap {sw['seconds']:.2f} s{f' ({phases})' if phases else ''}, {sw.get('checked', '')}"
            if e["placed"] == "swap"
            else f"own server: {sw['why']}"
        )
        out.append(f"  {e['drafter'].ljust(width)}  accept length {al}{ci_s}{tps}  ({how})")
        if e.get("error"):
            out.append(f"  {''.ljust(width)}  error: {' | '.join(e['error'].splitlines())}")
        if rep.per_position_acceptance:
            pos = "  ".join(f"{i + 1}: {a:.2f}" for i, a in enumerate(rep.per_position_acceptance))
            out.append(f"  {''.ljust(width)}  by draft position: {pos}")
        if rep.steps_estimate:
            est = ", ".join(
                f"{k}: {a:.2f}" for k, a in zip(rep.steps_estimate["steps"], rep.steps_estimate["accept_length"])
            )
            out.append(f"  {''.ljust(width)}  estimated for steps {est} (an estimate, from this run)")
    out.append(f"  target weights: {r.target_check}")
    out.append(f"  {r.seconds:.1f} s in all")
    return "\n".join(out)
