"""``ckpt quantize``: registered on the ``ckpt`` group by :mod:`ckpttools.cli.commands`."""

from __future__ import annotations

import sys
from typing import Any

import click

from ckpttools.cli.commands import DRY_RUN, EXIT_CODES_HELP, _release_spec, _ReleasesHelp, _show, _show_plan, cli

__all__ = ["quantize_cmd"]


@cli.command("quantize", epilog=EXIT_CODES_HELP)
@click.argument("drafter")
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory (written atomically).")
@click.option(
    "--scheme",
    type=click.Choice(["fp8-per-channel", "fp8-per-tensor"]),
    default="fp8-per-channel",
    show_default=True,
    help="One scale per output row, or one per weight.",
)
@click.option(
    "--engine",
    default="sglang",
    show_default=True,
    callback=lambda ctx, p, v: _release_spec(v),
    cls=_ReleasesHelp,
    help="The release the output is for (known: {releases}): a module it would load unquantized is refused, "
    "and the output is validated in its reading.",
)
@click.option(
    "--include",
    multiple=True,
    type=click.Choice(["lm_head", "fc"]),
    help="Also quantize lm_head or fc (repeatable); they stay bf16 otherwise.",
)
@click.option(
    "--activations",
    type=click.Choice(["auto", "none", "dynamic"]),
    default="auto",
    show_default=True,
    help="none: weights only; dynamic: inputs quantized per token at run time (FP8_DYNAMIC); auto: weights "
    "only where the release serves that (SGLang 0.5.17: per tensor only), else dynamic.",
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@DRY_RUN
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def quantize_cmd(
    drafter: str,
    out: str,
    scheme: str,
    engine: str,
    include: tuple[str, ...],
    activations: str,
    force: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Write an FP8 copy of a bf16 drafter (weights only, unless --activations dynamic), compressed-tensors layout.

    The decoder layer's linears become F8_E4M3 with a float32 weight_scale beside each
    (per channel or per tensor); lm_head and fc stay as they are unless --include names them,
    and a module the chosen release would load unquantized is refused with the reason. The
    output is validated for that release before it is moved to OUT.

    \b
    Examples:
      ckpt quantize ./drafter -o ./drafter-fp8
      ckpt quantize ./drafter -o ./drafter-fp8 --scheme fp8-per-tensor --engine vllm --include lm_head
      ckpt quantize ./drafter -o ./drafter-fp8-dyn --engine vllm --activations dynamic
    """
    from ckpttools.ops.quantize import QuantizeRejected, plan_quantize, quantize

    opts: dict[str, Any] = dict(scheme=scheme, engine=engine, include=include, activations=activations)
    if dry_run:
        return _show_plan(lambda: plan_quantize(drafter, out, **opts), as_json, force)
    try:
        r = quantize(drafter, out, force=force, **opts)
    except QuantizeRejected as e:
        _show(e.report, as_json, "render_quantize")
        click.echo(f"ckpt: error: {e}", err=True)
        sys.exit(e.exit_code)
    _show(r, as_json, "render_quantize")
