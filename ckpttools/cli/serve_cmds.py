"""``ckpt serve`` and ``ckpt swap``: a server that stays up, and a drafter refreshed on it
(ckpttools/measuring/serve.py)."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from ckpttools.cli import params as P

#: a drafter swap's check: how many prompts (the library's own bound, ckpttools.measuring.serve.MAX_CHECK)
CHECK = P.Bounded(1, 100_000, integer=True)


SERVE_EXIT = "Exit codes: 2 bad usage, a refused launch, or the server exited; 130 stopped (Ctrl-C or SIGTERM)."
SWAP_EXIT = (
    "Exit codes: 0 swapped and checked (at or above the bar), 1 the drafter does not fit, or below the bar "
    "(rolled back, checked), 2 bad usage, refused by the server, or a failed check."
)


def register(cli: click.Group) -> None:
    """Add ``serve`` and ``swap`` to the ``ckpt`` group (its command class: inputs declared)."""
    cli.command("serve", epilog=SERVE_EXIT)(serve_cmd)
    cli.command("swap", epilog=SWAP_EXIT)(swap_cmd)


@click.option("--engine", required=True, help="sglang or vllm (or name==release of a known table).")
@click.option("--target", required=True, help="The target model's folder.")
@click.option("--drafter", required=True, help="The drafter to start with (under --swap-root).")
@click.option("--swap-root", required=True, type=P.Path(), help="The only folder the hook loads drafters from.")
@click.option(
    "--api-key",
    envvar="CKPT_API_KEY",
    show_envvar=True,
    help="The key every weight update needs (SGLang --admin-api-key; the hook checks it on both engines).",
)
@click.option(
    "--engine-arg",
    "engine_args",
    multiple=True,
    help="Extra server argument (repeatable), e.g. --engine-arg=--dtype=bfloat16.",
)
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=P.PORT, help="The port (default: the launch default, 30000).")
@click.option("--tp", type=P.TP, default=1, show_default=True, help="Tensor parallel size.")
@click.option("--steps", type=P.STEPS, default=3, show_default=True, help="Draft steps.")
@click.option("--engine-python", help="The Python that has the engine installed.")
@click.option("--log", "log_path", type=P.Path(), help="The server log to write (ckpt logs reads it).")
@click.option("--print", "print_only", is_flag=True, help="Print the environment and argv; start nothing.")
def serve_cmd(**o: Any) -> None:
    """Start a server whose drafter ckpt swap can replace: ckpttools' guarded hook installed.

    \b
    Examples:
      CKPT_API_KEY=... ckpt serve --engine sglang --target ./t --drafter ./drafters/step-0 --swap-root ./drafters
      ckpt serve --engine vllm --target ./t --drafter ./drafters/step-0 --swap-root ./drafters --print
    """
    from ckpttools.cli.params import check_python as _check_python
    from ckpttools.io.guard import check_output
    from ckpttools.measuring.serve import serve, serve_command

    _check_python(o["engine_python"])
    if o["log_path"]:
        check_output(o["log_path"])
    cmd = serve_command(
        o["engine"],
        o["target"],
        o["drafter"],
        o["swap_root"],
        api_key=o["api_key"],
        engine_args=list(o["engine_args"]),
        host=o["bind"],
        port=o["port"],
        tp=o["tp"],
        steps=o["steps"],
        python=o["engine_python"],
        log_path=o["log_path"],
    )
    if o["print_only"]:
        for k, v in sorted(cmd.env.items()):
            click.echo(f"export {k}={shlex.quote(v)}")
        click.echo(shlex.join(cmd.argv))
        return
    say = lambda url: click.echo(  # noqa: E731
        f"ckpt: note: serving {cmd.release} on {url} (log: {cmd.log_path}); swap with: ckpt swap --host {url} DRAFTER",
        err=True,
    )
    serve(cmd, ready=say)


@click.option("--host", required=True, help="The server's URL (started by ckpt serve), e.g. http://127.0.0.1:30000.")
@click.argument("drafter")
@click.option("--api-key", envvar="CKPT_API_KEY", show_envvar=True, help="The key the server was started with.")
@click.option("--check", type=CHECK, help="Measure this many prompts after the swap.")
@click.option(
    "--min-accept-len", type=P.ACCEPT_LEN, help="With --check: below it, swap the previous drafter back; exit 1."
)
@click.option("--engine", type=click.Choice(["auto", "sglang", "vllm"]), default="auto", show_default=True)
@click.option("--prompts", default="builtin", show_default=True, help="The check's prompts (as verify takes them).")
@click.option("--max-new-tokens", type=P.NEW_TOKENS, default=64, show_default=True)
@click.option("--ignore-eos", is_flag=True, help="The check generates max-new-tokens every time.")
@click.option("--timeout", type=P.SECONDS, default=600.0, show_default=True, help="Per-request deadline, seconds.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report (schemas/swap-report.schema.json).")
def swap_cmd(drafter: str, **o: Any) -> None:
    """Put DRAFTER in place of the running drafter on a server started by ckpt serve, checked.

    \b
    Examples:
      ckpt swap --host http://127.0.0.1:30000 ./drafters/step-1000
      ckpt swap --host http://127.0.0.1:30000 ./drafters/step-2000 --check 32 --min-accept-len 2.5 --json
    """
    from ckpttools.measuring.serve import swap_drafter

    if o["min_accept_len"] is not None and o["check"] is None:
        raise click.UsageError("--min-accept-len needs --check N: the bar is held against a measurement")
    rep = swap_drafter(
        o["host"],
        drafter,
        api_key=o["api_key"],
        check=o["check"],
        min_accept_len=o["min_accept_len"],
        engine=o["engine"],
        prompts=o["prompts"],
        max_new_tokens=o["max_new_tokens"],
        timeout=o["timeout"],
        ignore_eos=o["ignore_eos"],
    )
    if o["as_json"]:
        from ckpttools.cli.output import emit_json

        emit_json(rep.to_dict())
    else:
        click.echo(_render(rep))
    if rep.exit_code:
        click.echo(f"ckpt: error: {rep.verdict}", err=True)
    sys.exit(rep.exit_code)


def _render(r: Any) -> str:
    s = r.swap
    lines = [
        f"server: {r.url} ({r.release}), target {r.target}",
        f"before: {r.before.path} ({str(r.before.digest)[:16]}, {r.before.source})",
        f"swap: {s.drafter} ({s.digest[:16]}): {s.ranks} rank(s), {s.maps_replaced} map(s) replaced, {s.checked}, "
        f"{s.seconds:.2f} s",
        r.target_check,
    ]
    if r.label:
        lines.append(f"named: weight_version {r.label}")
    if r.check is not None:
        lines.append(f"check: {r.check.verdict}")
    if r.rollback is not None:
        b = r.rollback
        lines.append(f"rollback: {b.drafter} ({b.digest[:16]}): {b.ranks} rank(s), {b.checked}")
    lines.append(f"now serving: {r.after.path} ({str(r.after.digest)[:16]})")
    lines.append(f"verdict: {r.verdict}")
    return "\n".join(lines)
