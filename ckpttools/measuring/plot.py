"""``ckpt verify --plot FILE.png``: the report's figures as one picture (matplotlib, an
optional extra: ``pip install 'ckpttools[plot]'``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckpttools.errors import CkptError

__all__ = ["plot_report", "plot_logs", "panels"]


def panels(rep: Any) -> list[tuple[str, list[str], list[float], dict[str, Any]]]:
    """(title, labels, values, marks) for each figure the report holds, in the order drawn;
    the terminal bars and the PNG both draw these."""
    out: list[tuple[str, list[str], list[float], dict[str, Any]]] = []
    if rep.per_position_acceptance:
        pos = rep.per_position_acceptance
        out.append(("acceptance by draft position", [str(i + 1) for i in range(len(pos))], list(pos), {"max": 1.0}))
    cats = {k: v for k, v in (rep.categories or {}).items() if v.get("accept_length") is not None}
    if len(cats) > 1:
        out.append(
            (
                "accept length by category",
                list(cats),
                [v["accept_length"] for v in cats.values()],
                {"overall": rep.accept_length, "flagged": [k for k, v in cats.items() if v.get("below_overall")]},
            )
        )
    bins = [b for b in (rep.context or {}).get("bins", []) if b.get("accept_length") is not None]
    if bins:
        out.append(
            (
                "accept length against context length (tokens)",
                [str(b["tokens"]) for b in bins],
                [b["accept_length"] for b in bins],
                {
                    "drafter_max_position_embeddings": rep.context.get("drafter_max_position_embeddings"),
                    "target_context": rep.context.get("target_context"),
                    "tokens": [b["tokens"] for b in bins],
                },
            )
        )
    done = [e for e in (rep.sweep or {}).get("settings", []) if e.get("speedup") or e.get("output_tokens_per_s")]
    if done:
        key = "speedup" if all(e.get("speedup") for e in done) else "output_tokens_per_s"
        out.append(
            (
                "speed-up over the baseline by setting" if key == "speedup" else "tokens/s by setting",
                [",".join(f"{k}={v}" for k, v in e["setting"].items()) for e in done],
                [e[key] for e in done],
                {"baseline": 1.0 if key == "speedup" else None},
            )
        )
    return out


def plot_report(rep: Any, path: str | Path) -> Path:
    """Write the report's panels to a PNG; refuses clearly without matplotlib."""
    plt = _pyplot("the report")
    ps = panels(rep)
    if not ps:
        raise CkptError("the report has no figures to plot (no accept length was measured)")
    fig, axes = plt.subplots(len(ps), 1, figsize=(8, 2.8 * len(ps)), squeeze=False)
    for ax, (title, labels, values, marks) in zip(axes[:, 0], ps):
        _draw(ax, title, labels, values, marks)
    fig.suptitle(f"ckpt verify: {rep.engine}, accept length {rep.accept_length or 0:.2f}", fontsize=11)
    return _save(plt, fig, path)


def _pyplot(what: str) -> Any:
    """matplotlib's pyplot on the Agg backend, or one clear error without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CkptError(
            f"drawing {what} needs matplotlib", hint="pip install 'ckpttools[plot]' (or matplotlib)"
        ) from None
    return plt


def _save(plt: Any, fig: Any, path: str | Path) -> Path:
    """The figure as a PNG, written whole through the output guard."""
    import io

    from ckpttools.io.guard import write_bytes

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return Path(path)


def _draw(ax: Any, title: str, labels: list[str], values: list[float], marks: dict[str, Any]) -> None:
    flagged = set(marks.get("flagged") or [])
    if "tokens" in marks:  # context: a line on a log axis, limits marked
        ax.plot(marks["tokens"], values, marker="o")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0, top=max(values) * 1.15)
        for key, style in (("drafter_max_position_embeddings", "--"), ("target_context", ":")):
            if marks.get(key):
                ax.axvline(marks[key], linestyle=style, color="gray")
                ax.text(marks[key], max(values), key.replace("_", " "), rotation=90, va="top", fontsize=7)
    else:
        ax.bar(labels, values, color=["tab:red" if lab in flagged else "tab:blue" for lab in labels])
        ax.tick_params(axis="x", labelrotation=20, labelsize=7)
        if marks.get("overall"):
            ax.axhline(marks["overall"], linestyle="--", color="gray")
        if marks.get("baseline"):
            ax.axhline(marks["baseline"], linestyle=":", color="gray")
    ax.set_title(title, fontsize=9)


def plot_logs(rep: Any, path: str | Path) -> Path:
    """``ckpt logs --plot``: accept length of each window over the log, its events marked."""
    plt = _pyplot("the log")
    if not rep.windows:
        raise CkptError("the log has no windows to plot (no accept length lines were read)")
    xs = list(range(len(rep.windows)))
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.plot(xs, [w["accept_length"] for w in rep.windows], marker="." if len(xs) < 200 else None, lw=1)
    ax.set_ylabel("accept length\n(tokens per verify step)")
    step = max(1, len(xs) // 8)
    ax.set_xticks(xs[::step], [str(w["time"] or w["line"]) for w in rep.windows[::step]], rotation=20, fontsize=7)
    where = {(w["file"], w["line"]): i for i, w in enumerate(rep.windows)}
    lines = sorted(where)
    for e in [e for e in rep.events if e["kind"] not in ("load", "ready")][:50]:
        import bisect

        j = bisect.bisect_left(lines, (e["file"], e["line"]))
        x = where[lines[min(j, len(lines) - 1)]]
        ax.axvline(x, color="red" if e["kind"] == "error" else "grey", ls="--", lw=0.8)
        ax.text(x, ax.get_ylim()[1], e["kind"], rotation=90, va="top", fontsize=7)
    segs = [s for s in getattr(rep, "segments", []) if s["accept_length"] is not None]
    if len(segs) > 1:  # the log split at weight updates: each segment's own figure over its windows
        import bisect

        for s in segs[:200]:
            x0 = bisect.bisect_left(lines, (s["file"], s["first_line"]))
            x1 = bisect.bisect_right(lines, (s["last_file"], s["last_line"])) - 1
            if x0 <= x1:
                ax.hlines(s["accept_length"], where[lines[x0]], where[lines[x1]], color="green", lw=1.2)
    elif rep.accept_length is not None:
        ax.axhline(rep.accept_length, color="green", lw=0.8, ls=":")
    ax.set_title(f"ckpt logs: {rep.engine or 'custom'}, accept length {rep.accept_length or 0:.2f}", fontsize=10)
    return _save(plt, fig, path)
