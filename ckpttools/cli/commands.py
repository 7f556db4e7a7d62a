"""The ``ckpt`` command: a thin layer over the library.

Each command parses its arguments, makes one library call, and renders the result as a
table or as JSON. Library modules are imported inside the commands so ``ckpt --help``
stays fast and header-only commands never import torch.

Exit codes: 0 success; 1 a check ran and found problems; 2 bad usage or unreadable input;
3 verify measured nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from ckpttools.cli import params as P
from ckpttools.cli.params import check_python as _check_python
from ckpttools.errors import EXIT_USAGE, CkptError

EXIT_CODES_HELP = (
    "Exit codes: 0 success, 1 a check found problems, 2 bad usage or unreadable input, 3 verify measured nothing."
)


#: the parameters that name what a command writes; every other parameter that names an
#: existing path is an input of the run, which no output may touch (ckpttools.io.guard)
OUTPUT_PARAMS = frozenset({"out", "output_file", "plot_file", "log_path", "workdir"})


class CkptCommand(click.Command):
    """A command whose every path-valued parameter (but its outputs) is declared as an input."""

    def invoke(self, ctx: click.Context) -> Any:
        from ckpttools.io.guard import declared_inputs

        values: list[Any] = []
        for name, v in ctx.params.items():
            if name in OUTPUT_PARAMS:
                continue
            values += list(v) if isinstance(v, (list, tuple)) else [v]
        with declared_inputs(v for v in values if isinstance(v, str)):  # this command's, not the next one's
            return super().invoke(ctx)


class CkptGroup(click.Group):
    """The one error boundary: a CkptError becomes one line plus a hint on stderr."""

    command_class = CkptCommand
    group_class = type

    def invoke(self, ctx: click.Context) -> Any:
        _notes_to_stderr()
        try:
            from ckpttools.io.env import debug

            debug()  # a CKPT_DEBUG that is neither 0 nor 1 is one error line, as any other bad value
            return super().invoke(ctx)
        except click.UsageError as e:  # bad flags: the same one-line form as every other error
            if os.environ.get("CKPT_DEBUG") == "1":
                raise
            _usage_error(e)
            ctx.exit(EXIT_USAGE)
        except (CkptError, OSError) as e:  # OSError: permissions, full disks and the like on paths the user gave
            if os.environ.get("CKPT_DEBUG") == "1":
                raise
            ctx.exit(report(e, _flag_namer(self, ctx)))


def report(e: CkptError | OSError, flag: Callable[[str], str]) -> int:
    """The error boundary's lines for ``e`` on stderr (one error line, at most one hint), each
    library parameter written as ``flag`` names it; the exit code. The group's, and the entry's
    fast path's (ckpttools.cli.entry)."""
    if isinstance(e, CkptError):
        message, hint = e.render(flag)
        click.echo(f"ckpt: error: {_capped(message)}", err=True)
        if hint:
            click.echo(f"ckpt: hint: {_capped(hint)}", err=True)
        return e.exit_code
    click.echo(f"ckpt: error: {_capped(str(e))}", err=True)
    click.echo("ckpt: hint: set CKPT_DEBUG=1 for a traceback", err=True)
    return EXIT_USAGE


class _ReleasesHelp(click.Option):
    """An --engine option whose help lists the known SGLang and vLLM releases, read from the engine
    tables only when the help is shown (not at every start-up)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ckpttools.engines.releases import known_specs

        rec = super().get_help_record(ctx)
        if rec is None:
            return None
        known = ", ".join(s for s in known_specs() if s.startswith(("sglang", "vllm")))
        return rec[0], rec[1].replace("{releases}", known)


def _flag_namer(group: click.Group, ctx: click.Context) -> Callable[[str], str]:
    """How the command that ran spells each library parameter: its option's long flag."""
    cmd = group.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
    return _command_namer(cmd)


def command_flags(name: str) -> Callable[[str], str]:
    """:func:`_flag_namer` for the top-level command ``name`` (the entry's fast path has no context)."""
    return _command_namer(cli.commands[name])


#: how a note said outside any Click context names parameters (the entry's fast path sets it)
_NOTE_NAMER: list[Callable[[str], str]] = []


def note_flags_default(name: str) -> None:
    """Notes said outside a Click context name parameters as command ``name`` spells them."""
    _NOTE_NAMER[:] = [command_flags(name)]


def _command_namer(cmd: click.Command | None) -> Callable[[str], str]:
    flags: dict[str, str] = {}
    todo = [cmd] if cmd is not None else []
    while todo:
        c = todo.pop()
        if isinstance(c, click.Group):
            todo.extend(c.commands.values())
        for p in c.params:
            if isinstance(p, click.Option) and p.name is not None:
                longs = [o for o in p.opts if o.startswith("--")]
                flags.setdefault(p.name, (longs or p.opts)[0])
    return lambda name: flags.get(name, "--" + name.replace("_", "-"))


def _usage_error(e: click.UsageError) -> None:
    if isinstance(e, click.exceptions.NoArgsIsHelpError):  # a bare `ckpt`: the help, as Click shows it
        click.echo(e.format_message(), err=True)
        return
    cmd = e.ctx.command_path if e.ctx is not None else "ckpt"
    click.echo(f"ckpt: error: {_capped(e.format_message())}", err=True)
    click.echo(f"ckpt: hint: see `{cmd} --help`", err=True)


#: the longest error or hint line printed: an input echoed back (a 100 KB flag value, a megabyte
#: class name) is cut, so the one line stays readable
MAX_LINE = 2000


def _capped(text: str) -> str:
    """``text`` on one line, cut to :data:`MAX_LINE` characters with how many were left out."""
    text = text.replace("\n", " ")
    if len(text) <= MAX_LINE:
        return text
    return f"{text[: MAX_LINE - 60]} ... ({len(text) - MAX_LINE + 60:,} more characters)"


def _notes_to_stderr() -> None:
    """What the library said on the side (stale temporaries removed, ...) goes to stderr as a
    note, with each parameter it names written as the running command's flag. The handler is
    put in place before the first note (logging is not imported by a command that says nothing)."""
    from ckpttools.io.fsutil import BEFORE_FIRST_NOTE

    # huggingface_hub logs each retry itself; the CLI says what failed once (set before it is imported:
    # its root logger takes HF_HUB_VERBOSITY then)
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    if _install_note_handler not in BEFORE_FIRST_NOTE:
        BEFORE_FIRST_NOTE.append(_install_note_handler)


def _install_note_handler() -> None:
    import logging

    class NoteHandler(logging.Handler):
        """The library's log records as ``ckpt: note:`` lines, each parameter named as its flag."""

        def emit(self, record: logging.LogRecord) -> None:
            from ckpttools.errors import render_params

            ctx = click.get_current_context(silent=True)
            root = ctx.find_root() if ctx is not None else None
            if root is not None:
                flag = _flag_namer(cli, root)
            else:
                flag = _NOTE_NAMER[0] if _NOTE_NAMER else (lambda n: "--" + n.replace("_", "-"))
            click.echo(f"ckpt: note: {render_params(record.getMessage(), flag)}", err=True)

    log = logging.getLogger("ckpttools")
    if not any(type(h).__name__ == "NoteHandler" for h in log.handlers):
        log.addHandler(NoteHandler())
    log.setLevel(logging.INFO)
    log.propagate = False


@click.group(cls=CkptGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ckpttools", prog_name="ckpt")
def cli() -> None:
    """Inspect, check, remap, export and measure EAGLE-3 speculative-decoding drafters.

    \b
    Examples:
      ckpt demo                                 # the built-in example, no network, no GPU
      ckpt inspect ./my-drafter                 # what is this checkpoint?
      ckpt inspect org/drafter@main --json      # a Hub repo from the local cache
    """


DRY_RUN = click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be written (each tensor's source; the bytes copied, gathered and cast; the config "
    "diff; the side files kept and skipped; the check) and write nothing. With --json: schemas/write-plan.schema.json.",
)


def _show_plan(make: Any, as_json: bool, force: bool = False) -> None:
    """--dry-run: build the plan (no download; ckpttools' and huggingface_hub's caches read, never
    written) and print it. It is refused where the run would be, with the same line: the executor's
    own preflight (ckpttools.io.preflight) runs on it."""
    from ckpttools.io.hub import read_only_cache
    from ckpttools.io.preflight import preflight

    with read_only_cache():
        plan = make()
    in_place = plan.report.get("backup") is not None  # validate --fix --in-place replaces its drafter
    preflight(plan, force=force, in_place=in_place)
    d = plan.describe()
    if as_json:
        from ckpttools.cli.output import emit_json

        emit_json(d)
    else:
        from ckpttools.cli.render import render_plan

        click.echo(render_plan(d))


def _show(result: Any, as_json: bool, render: str, **options: Any) -> None:
    """Data to stdout: the result's JSON with --json, else its human rendering by the function
    ``render`` of ckpttools.cli.render (imported only then: --json never loads the renderers)."""
    if as_json:
        from ckpttools.cli.output import emit_json

        emit_json(result.to_dict())
    else:
        from ckpttools.cli import render as renderers

        click.echo(getattr(renderers, render)(result, **options))


# ---------------------------------------------------------------------------- inspect
@cli.command("inspect", epilog=EXIT_CODES_HELP)
@click.argument("path")
@click.option("--revision", help="Hub revision (branch, tag or commit) for a repo id.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (stable keys, see README).")
@click.option("--tensors/--no-tensors", default=True, show_default=True, help="Include the tensor table.")
@click.option("--filter", "pattern", metavar="GLOB", help="Only tensors whose name matches, e.g. 'layers.0.*'.")
@click.option(
    "--all-tensors", is_flag=True, help="One row per tensor (default: repeated layers grouped; --json has all)."
)
def inspect_cmd(
    path: str, revision: str | None, as_json: bool, tensors: bool, pattern: str | None, all_tensors: bool
) -> None:
    """Describe a checkpoint from its config and safetensors headers only.

    PATH is a directory, a .safetensors file, a sharded checkpoint, or a Hub repo id
    (org/name[@revision], resolved through the local Hugging Face cache).

    \b
    Examples:
      ckpt inspect ./drafter
      ckpt inspect ./drafter --json --no-tensors
      ckpt inspect ./target --filter 'model.layers.0.*'
    """
    if revision is not None and os.path.lexists(path):
        raise click.UsageError(f"--revision goes with a Hub repo id; {path} is a local path")
    from ckpttools.ops.inspect import inspect

    report = inspect(path, tensors=tensors, filter=pattern, revision=revision)
    _show(report, as_json, "render_inspect", all_tensors=all_tensors)


# ---------------------------------------------------------------------------- vocab
@cli.command("diff-vocab", epilog=EXIT_CODES_HELP)
@click.argument("a")
@click.argument("b")
@click.option("--tokenizer", type=P.Path(exists=True), help="HF tokenizer.json (or its directory) for token strings.")
@click.option(
    "--frequencies",
    type=P.Path(exists=True),
    help="Token counts: JSON {id: count}, .npy of counts, or JSONL of token-id lists.",
)
@click.option(
    "--show", type=P.SHOW, default=10, show_default=True, help="How many differing slots and one-sided tokens to list."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def diff_vocab_cmd(a: str, b: str, tokenizer: str | None, frequencies: str | None, show: int, as_json: bool) -> None:
    """Compare two vocabulary mappings: slots that agree, and tokens shared.

    A and B are each a drafter checkpoint or a mapping file (.safetensors, .npy, .json,
    .pt). Slots count positions; shared tokens count what a remap of A into B's space
    would carry over.

    \b
    Examples:
      ckpt diff-vocab ./drafter-k2 ./drafter-k25
      ckpt diff-vocab ./drafter mapping.safetensors --tokenizer ./target --show 20
    """
    from ckpttools.vocab.diff import diff_vocab

    _show(diff_vocab(a, b, tokenizer=tokenizer, frequencies=frequencies, show=show), as_json, "render_diff_vocab")


@cli.group("vocab")
def vocab_group() -> None:
    """Build vocabulary mappings (d2t/t2d) from token frequencies."""


@vocab_group.command("build", epilog=EXIT_CODES_HELP)
@click.option(
    "--frequencies",
    required=True,
    type=P.Path(exists=True),
    help="JSON {id: count}, .npy of counts, or JSONL of token-id lists (counted streaming).",
)
@click.option("--draft-vocab-size", required=True, type=P.VOCAB, help="Vd: how many tokens to keep.")
@click.option("--vocab-size", type=P.VOCAB, help="Target vocab size V (t2d's length); needed for JSON/JSONL.")
@click.option("-o", "--output", "out", required=True, type=P.Path(), help="Output .safetensors (d2t + t2d).")
@click.option("--force", is_flag=True, help="Replace the output if it exists.")
@DRY_RUN
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def vocab_build_cmd(
    frequencies: str,
    draft_vocab_size: int,
    vocab_size: int | None,
    out: str,
    force: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Keep the top-N tokens by frequency (ties: lower id), in ascending id order.

    Writes d2t (int64 offsets) and t2d (bool) to a .safetensors file, as SpecForge,
    EAGLE and speculators do.

    \b
    Example:
      ckpt vocab build --frequencies counts.jsonl --vocab-size 163840 --draft-vocab-size 32000 -o map.safetensors
    """
    from ckpttools.vocab.diff import build_vocab, plan_vocab

    if dry_run:
        return _show_plan(lambda: plan_vocab(frequencies, draft_vocab_size, out, vocab_size=vocab_size), as_json, force)
    _show(build_vocab(frequencies, draft_vocab_size, out, vocab_size=vocab_size, force=force), as_json, "render_build")


# ---------------------------------------------------------------------------- validate
@cli.command("validate", epilog=EXIT_CODES_HELP)
@click.argument("drafter")
@click.option("--target", help="The target: a checkpoint directory, Hub repo id, or its config.json.")
@click.option("--deep", is_flag=True, help="Stream every tensor (bounded memory): NaN/Inf, zero or constant heads.")
@click.option(
    "--max-download",
    default="20GB",
    show_default=True,
    help="With --deep on a Hub repo: the most to download; a larger repo is refused before any transfer.",
)
@click.option(
    "--engine",
    default="sglang",
    show_default=True,
    callback=lambda ctx, p, v: _release_spec(v),
    cls=_ReleasesHelp,
    help="Whose reading to check against: sglang or vllm, optionally a release, NAME==VERSION or NAME@VERSION "
    "(known: {releases}); without one, the newest "
    "known release (the report names it). --fix takes SGLang releases only.",
)
@click.option(
    "--load-plan",
    "show_plan",
    is_flag=True,
    help="Also show what that release builds: each tensor loaded, renamed or dropped; each parameter from "
    "the file, shared, initialized or overwritten.",
)
@click.option(
    "--engine-arg",
    "engine_args",
    multiple=True,
    help="A server argument the drafter will be launched with (repeatable), e.g. --engine-arg=--quantization=fp8: "
    "validate says what quantization that gives the drafter.",
)
@click.option("--fix", "do_fix", is_flag=True, help="Write a corrected copy (needs -o or --in-place).")
@click.option("-o", "--output", "out", type=P.Path(), help="Where --fix writes the corrected copy.")
@click.option("--in-place", is_flag=True, help="With --fix: replace DRAFTER, keeping the original as DRAFTER.bak-TIME.")
@click.option("--force", is_flag=True, help="With --fix -o: replace the output if it exists.")
@DRY_RUN
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def validate_cmd(
    drafter: str,
    target: str | None,
    deep: bool,
    max_download: str,
    engine: str,
    show_plan: bool,
    engine_args: tuple[str, ...],
    do_fix: bool,
    out: str | None,
    in_place: bool,
    force: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Check a drafter's config, tensors and mapping, optionally against its target.

    DRAFTER is a checkpoint directory, a Hub repo id, or a bare config.json (config
    checks only). Exit code 0 means no errors, 1 errors found, 2 unreadable input.

    \b
    Examples:
      ckpt validate ./drafter --target ./target
      ckpt validate drafter/config.json --target target/config.json --json
      ckpt validate ./drafter --target ./target --fix -o ./drafter-fixed
    """
    from ckpttools.io.writer import parse_size

    try:
        parse_size(max_download)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--max-download") from None
    if (out or in_place or force or dry_run) and not do_fix:
        raise click.UsageError("-o/--in-place/--force/--dry-run go with --fix")
    if do_fix and bool(out) == in_place:
        raise click.UsageError("--fix needs exactly one of -o OUT or --in-place")

    if do_fix:
        from ckpttools.ops.fix import fix, plan_fix

        if dry_run:
            return _show_plan(
                lambda: plan_fix(drafter, out, target=target, in_place=in_place, download=False, engine=engine),
                as_json,
                force,
            )
        res = fix(drafter, out, target=target, in_place=in_place, force=force, engine=engine)
        _show(res, as_json, "render_fix")
        sys.exit(0 if res.after.ok else 1)
    from ckpttools.ops.validate import validate

    r = validate(
        drafter,
        target,
        deep=deep,
        max_download=max_download,
        engine=engine,
        load_plan=show_plan,
        engine_args=tuple(engine_args),
    )
    _show(r, as_json, "render_validation")
    sys.exit(0 if r.ok else 1)


# ---------------------------------------------------------------------------- remap
@cli.command("remap", epilog=EXIT_CODES_HELP)
@click.argument("drafter")
@click.option("-o", "--output", "out", required=True, type=P.Path(), help="Output directory (written atomically).")
@click.option("--to", "to", help="Destination mapping: another drafter, a mapping file, or a target (full vocabulary).")
@click.option("--frequencies", type=P.Path(exists=True), help="Build the destination from token counts instead.")
@click.option("--draft-vocab-size", type=P.VOCAB, help="With --frequencies: how many tokens to keep.")
@click.option(
    "--fill",
    type=click.Choice(["zero", "mean", "target"]),
    default="zero",
    show_default=True,
    help="Rows for tokens new to the drafter: zeros, the mean of carried rows, or the target's lm_head rows.",
)
@click.option("--target", help="The target model (for --fill target, and embed_tokens rows across tokenizers).")
@click.option(
    "--source-tokenizer", type=P.Path(exists=True), help="The drafter's tokenizer.json, when tokenizers differ."
)
@click.option("--target-tokenizer", type=P.Path(exists=True), help="The destination's tokenizer.json.")
@click.option("--max-shard-size", help="Shard the output, e.g. 5GB (default: one file).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--fsync", is_flag=True, help="Flush the output to disk before the final rename (power-loss safe).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@DRY_RUN
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def remap_cmd(
    drafter: str,
    out: str,
    to: str | None,
    frequencies: str | None,
    draft_vocab_size: int | None,
    fill: str,
    target: str | None,
    source_tokenizer: str | None,
    target_tokenizer: str | None,
    max_shard_size: str | None,
    force: bool,
    fsync: bool,
    quiet: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Move a drafter into another vocabulary mapping: lm_head rows follow their tokens.

    \b
    Examples:
      ckpt remap ./drafter-k2 --to ./mapping-k25.safetensors -o ./drafter-k25
      ckpt remap ./drafter --frequencies counts.jsonl --draft-vocab-size 32000 --fill mean -o ./out
      ckpt remap ./drafter --to ./other --source-tokenizer a/tokenizer.json --target-tokenizer b/tokenizer.json -o ./out
    """
    if (to is None) == (frequencies is None):
        raise click.UsageError("give exactly one of --to or --frequencies")
    if frequencies and not draft_vocab_size:
        raise click.UsageError("--frequencies needs --draft-vocab-size")
    try:
        from ckpttools.io.writer import parse_size

        parse_size(max_shard_size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--max-shard-size") from None
    from ckpttools.cli.output import byte_progress
    from ckpttools.ops.remap import plan_remap, remap

    opts: dict[str, Any] = dict(
        to=to,
        frequencies=frequencies,
        draft_vocab_size=draft_vocab_size,
        fill=fill,
        target=target,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        max_shard_size=max_shard_size,
        fsync=fsync,
    )
    if dry_run:
        return _show_plan(lambda: plan_remap(drafter, out, **opts, download=False), as_json, force)
    with byte_progress("remap", quiet) as bar:
        r = remap(drafter, out, **opts, force=force, progress=bar)
    _show(r, as_json, "render_remap")


# ---------------------------------------------------------------------------- export
@cli.command("export", epilog=EXIT_CODES_HELP)
@click.argument("src")
@click.option("-o", "--output", "out", required=True, type=P.Path(), help="Output directory.")
@click.option("--format", "fmt", type=click.Choice(["sglang", "vllm", "trtllm"]), default="sglang", show_default=True)
@click.option("--target", help="The target (checkpoint, repo id or config.json): aux layer ids and context length.")
@click.option(
    "--dtype",
    type=click.Choice(["auto", "bf16", "fp16", "keep"]),
    default="auto",
    show_default=True,
    help="Cast floating-point weights; auto = the target's dtype with --target, else keep.",
)
@click.option("--max-shard-size", help="Shard the output, e.g. 5GB (default: one file).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--fsync", is_flag=True, help="Flush the output to disk before the final rename.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@DRY_RUN
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def export_cmd(
    src: str,
    out: str,
    fmt: str,
    target: str | None,
    dtype: str,
    max_shard_size: str | None,
    force: bool,
    fsync: bool,
    quiet: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Export a drafter of any layout so SGLang (or vLLM, or TensorRT-LLM) loads it as intended.

    Reads official EAGLE, SpecForge/SGLang, vLLM/speculators, ModelOpt and fp32 training
    outputs. What it writes is validated before it is moved to OUT; if validate finds an
    error, export exits 1, prints the findings, and leaves nothing at OUT. --format trtllm
    also writes trtllm-speculative-config.yaml (the captured layers); it follows TensorRT-LLM's
    source only (no run), and is checked by its load plan and validate's engine-neutral checks.

    \b
    Examples:
      ckpt export ./EAGLE3-LLaMA3.1-8B -o ./for-sglang --target meta-llama/Llama-3.1-8B-Instruct
      ckpt export ./speculators-drafter -o ./for-sglang --dtype bf16
      ckpt export ./drafter -o ./for-vllm --format vllm --target ./target
      ckpt export ./drafter -o ./for-trtllm --format trtllm --target ./target
    """
    try:
        from ckpttools.io.writer import parse_size

        parse_size(max_shard_size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--max-shard-size") from None
    from ckpttools.cli.output import byte_progress
    from ckpttools.ops.export import ExportRejected, export, plan_export

    if dry_run:
        plan_opts: dict[str, Any] = dict(
            format=fmt, target=target, dtype=dtype, max_shard_size=max_shard_size, download=False
        )
        return _show_plan(lambda: plan_export(src, out, **plan_opts), as_json, force)
    try:
        with byte_progress("export", quiet) as bar:
            r = export(
                src,
                out,
                format=fmt,
                target=target,
                dtype=dtype,
                max_shard_size=max_shard_size,
                force=force,
                fsync=fsync,
                progress=bar,
            )
    except ExportRejected as e:
        _show(e.report, as_json, "render_export")
        click.echo(f"ckpt: error: {e}", err=True)
        sys.exit(e.exit_code)
    _show(r, as_json, "render_export")


# ---------------------------------------------------------------------------- verify
@cli.command("verify", epilog=EXIT_CODES_HELP)
@click.argument("drafter_args", nargs=-1, metavar="[DRAFTER]...")
@click.option("--host", help="A running server's URL, e.g. http://127.0.0.1:30000.")
@click.option(
    "--engine",
    default="auto",
    show_default=True,
    callback=lambda ctx, p, v: _engine_spec(v),
    cls=_ReleasesHelp,
    help="auto, torch, sglang or vllm, optionally with a release, NAME==VERSION or NAME@VERSION "
    "(known: {releases}); without one, the release "
    "the server (or --engine-python) reports.",
)
@click.option(
    "--prompts",
    default="builtin",
    show_default=True,
    help='\'builtin\' (151 prompts, 7 categories) or a JSONL file of {"prompt"}, {"input_ids"} or '
    '{"messages"}, each with an optional "category".',
)
@click.option(
    "--num-prompts", type=P.PROMPTS, default=16, show_default=True, help="At most this many distinct prompts."
)
@click.option(
    "--repeat",
    type=P.REPEAT,
    default=1,
    show_default=True,
    help="Send each prompt this many times (the interval stays over distinct prompts).",
)
@click.option("--max-new-tokens", type=P.NEW_TOKENS, default=256, show_default=True)
@click.option(
    "--concurrency",
    type=P.LEVELS,
    default="1",
    show_default=True,
    help="Requests in flight; a list (1,8) measures each level on the same server.",
)
@click.option(
    "--context-lengths",
    help="Also measure at these lengths (prompt plus generation), e.g. 1k,8k,32k; needs token ids.",
)
@click.option(
    "--sweep",
    "sweep_spec",
    help="With --launch: one server per setting, e.g. 'steps=1,3;topk=1,4;draft_tokens=4,8', plus a baseline.",
)
@click.option("--plot", "plot_file", type=P.Path(), help="Draw the report's figures to this PNG (needs matplotlib).")
@click.option("--temperature", type=P.TEMPERATURE, default=0.0, show_default=True)
@click.option("--ignore-eos", is_flag=True, help="Generate max-new-tokens every time.")
@click.option("--baseline-host", help="The same target without speculation, for the speedup.")
@click.option("--min-accept-len", type=P.ACCEPT_LEN, help="The bar (tokens per verify step); below it exit code 1.")
@click.option("--flush-cache", is_flag=True, help="POST /flush_cache first (SGLang).")
@click.option(
    "--tokenizer", type=P.Path(exists=True), help="Tokenize text prompts locally (servers without a tokenizer)."
)
@click.option("--timeout", type=P.SECONDS, default=600.0, show_default=True, help="Per-request deadline, seconds.")
@click.option("--launch", is_flag=True, help="Start the server (needs --target and the drafter), measure, stop it.")
@click.option("--target", help="With --launch or --engine torch: the target model.")
@click.option(
    "--drafter",
    multiple=True,
    help="With --launch: the drafter (or give it as DRAFTER); several measure each against one loaded target.",
)
@click.option("--port", type=P.PORT, help="With --launch: the port (default: a free one).")
@click.option("--tp", type=P.TP, default=1, show_default=True, help="With --launch: tensor parallel size.")
@click.option("--steps", type=P.STEPS, default=3, show_default=True, help="Draft steps.")
@click.option("--topk", type=P.TOPK, default=1, show_default=True, help="With --launch sglang: EAGLE topk.")
@click.option(
    "--engine-arg",
    "engine_args",
    multiple=True,
    help="Extra server argument (repeatable), e.g. --engine-arg=--dtype=bfloat16.",
)
@click.option("--engine-python", help="With --launch: the Python that has the engine installed.")
@click.option(
    "--log",
    "log_path",
    type=P.Path(),
    help="With --launch: the server log to write. With --host: the server's log to read (its lifetime figures).",
)
@click.option(
    "--ready-timeout",
    type=P.SECONDS,
    default=900.0,
    show_default=True,
    help="With --launch: seconds to wait for health.",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    metavar="DEVICE",
    help="With --engine torch: cpu, cuda, cuda:N or mps (checked against this torch and machine).",
)
@click.option("--output", "output_file", type=P.Path(), help="Also write the JSON report here (kept on failure too).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def verify_cmd(drafter_args: tuple[str, ...], **o: Any) -> None:
    """Measure accept length through a real server and give a verdict.

    Reports accept length in the engines' convention (tokens per verify step =
    accepted drafts + 1) and accepted drafts per step, both labeled.

    \b
    Examples:
      ckpt verify --host http://127.0.0.1:30000 --min-accept-len 2.5
      ckpt verify --host http://127.0.0.1:8000 --baseline-host http://127.0.0.1:8001 --json
      ckpt verify --launch --engine sglang --target ./target --drafter ./drafter --steps 3
      ckpt verify --engine torch --target ./target ./drafter --steps 3
      ckpt verify --launch --engine vllm --target ./target ./ckpt-1000 ./ckpt-2000 ./ckpt-3000
    """

    from ckpttools.measuring.measure import measure

    bar = _ProgressBar(o["quiet"])  # made at the first request, if at all
    req = _measure_request([*o["drafter"], *drafter_args], o)
    say = None if o["quiet"] else (lambda line: click.echo(f"ckpt: note: {line}", err=True))
    try:
        rep = measure(req, on_request=bar.update if bar.wanted else None, on_note=say)
    finally:
        bar.close()
    _render_measured(rep, o["as_json"])


def _render_measured(rep: Any, as_json: bool) -> None:
    """A measurement's report, its one error line where it measured nothing, and its exit code."""
    from ckpttools.measuring.compare import CompareReport

    if isinstance(rep, CompareReport):
        _show(rep, as_json, "render_compare")
        err = rep.error()  # a drafter that failed, or measured nothing: one error line, the run's exit code
        if err is not None:
            raise err
        sys.exit(rep.exit_code)
    _show(rep, as_json, "render_verify")
    if rep.accept_length is None:
        click.echo(f"ckpt: error: {rep.verdict}", err=True)
        click.echo("ckpt: hint: check the server log; every request failed or carried no speculative figures", err=True)
    sys.exit(rep.exit_code)


#: verify's options that go to the request as given (the rest are parsed first, or are the CLI's own)
_REQUEST_OPTS = (
    "engine",
    "host",
    "launch",
    "target",
    "baseline_host",
    "flush_cache",
    "prompts",
    "num_prompts",
    "repeat",
    "max_new_tokens",
    "temperature",
    "ignore_eos",
    "min_accept_len",
    "tokenizer",
)
#: options that count only when given (their defaults are the request's)
_GIVEN_OPTS = ("port", "tp", "steps", "topk", "engine_args", "engine_python", "ready_timeout", "device", "timeout")


def _given(name: str) -> bool:
    """Whether the user set this parameter (not its default)."""
    from click.core import ParameterSource

    src = click.get_current_context().get_parameter_source(name)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _measure_request(drafters: list[str], o: dict[str, Any]) -> Any:
    """The verify options as one request (parse: the values; the request judges the combinations)."""
    from ckpttools.measuring.request import MeasureRequest, RequestError, Sweep

    kw: dict[str, Any] = {k: o[k] for k in _REQUEST_OPTS}
    kw |= {k: o[k] for k in _GIVEN_OPTS if _given(k)}
    kw |= {"log": o["log_path"], "output": o["output_file"], "plot": o["plot_file"]}
    kw["concurrency"] = o["concurrency"]  # parsed by click (P.LEVELS)
    if o["context_lengths"] is not None:  # an empty value too: refused, not read as no axis
        from ckpttools.measuring.traffic import parse_lengths

        kw["context_lengths"] = parse_lengths(o["context_lengths"])
    if o["sweep_spec"] is not None:  # an empty value too: refused, not read as no sweep
        from ckpttools.measuring.sweep import parse_sweep

        kw["sweep"] = Sweep(tuple(parse_sweep(o["sweep_spec"])))
    try:
        req = MeasureRequest.from_options(drafters, **kw)
    except RequestError as e:
        message, _ = e.render(_verify_flag)
        if e.param is not None:
            raise click.BadParameter(message, param_hint=_verify_flag(e.param)) from None
        raise click.UsageError(message) from None
    _check_python(o["engine_python"])
    return req


def _verify_flag(name: str) -> str:
    """How verify spells a request's parameter: its option's long flag."""
    names = {"sweep": "sweep_spec", "log": "log_path", "output": "output_file", "plot": "plot_file"}
    for p in verify_cmd.params:
        if isinstance(p, click.Option) and p.name == names.get(name, name):
            return next((f for f in p.opts if f.startswith("--")), p.opts[0])
    return "--" + name.replace("_", "-")


class _ProgressBar:
    """A progress bar on a terminal for one drafter's requests (measure reports those alone: not a
    sweep's, nor several drafters'), made at the first request, its total the run's own (the
    prompts as read, repeats included)."""

    def __init__(self, quiet: bool) -> None:
        self.wanted = not quiet and sys.stderr.isatty()
        self._bar: Any = None

    def update(self, done: int, total: int) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc="verify", unit="req", file=sys.stderr, leave=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _release_spec(value: str) -> str:
    """validate's --engine: sglang or vllm, or name==release of a known engine table."""
    from ckpttools.engines.engine import SERVER_ENGINES
    from ckpttools.engines.releases import resolve
    from ckpttools.errors import ConfigError

    try:
        rel = resolve(value)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--engine") from None
    if rel.name not in SERVER_ENGINES:
        raise click.BadParameter(f"{rel.spec}: validate checks sglang or vllm", param_hint="--engine")
    return value


def _engine_spec(value: str) -> str:
    """verify's --engine: a name, or name==release of a known engine table."""
    from ckpttools.errors import ConfigError
    from ckpttools.measuring.request import split_engine

    try:
        split_engine(value)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--engine") from None
    return value


# ---------------------------------------------------------------------------- example
@cli.group("example")
def example_group() -> None:
    """Write tiny example checkpoints (drafters in every layout, Llama targets)."""


@example_group.command("drafter")
@click.argument("out", type=P.Path())
@click.option(
    "--flavor",
    type=click.Choice(["sglang", "eagle", "vllm", "speculators", "mla", "modelopt", "training"]),
    default="sglang",
    show_default=True,
    help="Which layout to write.",
)
@click.option(
    "--vocab-size",
    type=P.Bounded(2, 1 << 20, integer=True),
    default=1024,
    show_default=True,
    help="Target vocab size V.",
)
@click.option(
    "--draft-vocab-size",
    type=P.Bounded(1, 1 << 20, integer=True),
    default=256,
    show_default=True,
    help="Draft vocab size Vd (at most V).",
)
@click.option(
    "--hidden-size",
    type=P.Bounded(8, 1 << 14, integer=True),
    default=64,
    show_default=True,
    help="A multiple of 8 (4 heads of an even size).",
)
@click.option(
    "--seed",
    type=P.Bounded(0, 2**32 - 1, integer=True),
    default=0,
    show_default=True,
    help="Seed for weights and the mapping.",
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
def example_drafter(
    out: str, flavor: str, vocab_size: int, draft_vocab_size: int, hidden_size: int, seed: int, force: bool
) -> None:
    """Write a tiny EAGLE-3 drafter to OUT.

    \b
    Example:
      ckpt example drafter ./d --flavor eagle && ckpt inspect ./d
    """
    if draft_vocab_size > vocab_size:
        raise click.BadParameter(
            f"{draft_vocab_size} is larger than --vocab-size {vocab_size}", param_hint="--draft-vocab-size"
        )
    from ckpttools.demo.tiny import build_drafter

    p = build_drafter(
        out,
        flavor,
        vocab_size=vocab_size,
        draft_vocab_size=draft_vocab_size,
        hidden_size=hidden_size,
        seed=seed,
        force=force,
    )
    click.echo(str(p))


@example_group.command("target")
@click.argument("out", type=P.Path())
@click.option("--vocab-size", type=P.Bounded(2, 1 << 20, integer=True), default=1024, show_default=True)
@click.option(
    "--hidden-size",
    type=P.Bounded(8, 1 << 14, integer=True),
    default=64,
    show_default=True,
    help="A multiple of 8 (4 heads of an even size).",
)
@click.option("--num-layers", type=P.Bounded(4, 512, integer=True), default=8, show_default=True)
@click.option("--max-position-embeddings", type=P.Bounded(1, 1 << 34, integer=True), default=4096, show_default=True)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
def example_target(
    out: str, vocab_size: int, hidden_size: int, num_layers: int, max_position_embeddings: int, force: bool
) -> None:
    """Write a tiny Llama target model to OUT.

    \b
    Example:
      ckpt example target ./t --num-layers 8
    """
    from ckpttools.demo.tiny import build_target

    p = build_target(
        out,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        max_position_embeddings=max_position_embeddings,
        force=force,
    )
    click.echo(str(p))


# ---------------------------------------------------------------------------- demo
@cli.command("demo")
@click.option("--workdir", type=P.Path(), help="Keep the demo's files here (default: a temporary directory).")
@click.option(
    "--engine",
    type=click.Choice(["torch", "vllm", "sglang"]),
    default="torch",
    show_default=True,
    help="Where to measure: the PyTorch probe (no server), or a real server per step.",
)
@click.option("--engine-python", help="With vllm/sglang: the Python that has the engine installed.")
def demo_cmd(workdir: str | None, engine: str, engine_python: str | None) -> None:
    """Replay the project's story on a shipped trained pair (no network, no GPU).

    A drafter trained for target A; the pipeline wants it in another vocabulary mapping
    (the naive d2t swap collapses, ckpt remap restores it); then the same drafter on
    target B, target A trained further: every check passes, acceptance drops.
    """
    from ckpttools.engines.engine import engine_for

    if engine_python and not engine_for(engine).serves:
        raise click.UsageError("--engine-python goes with --engine vllm or sglang (the torch probe runs here)")
    _check_python(engine_python)
    if workdir and os.path.exists(workdir) and not os.path.isdir(workdir):
        raise click.BadParameter(f"{workdir} is not a directory", param_hint="--workdir")
    from ckpttools.demo.story import run_demo

    code = run_demo(workdir, echo=click.echo, engine=engine, engine_python=engine_python)
    sys.exit(code)


# ---------------------------------------------------------------------------- logs
@cli.command("logs", epilog=EXIT_CODES_HELP)
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--pattern",
    metavar="REGEX",
    help="A custom profiler's lines: named groups accept_len, or tokens and cycles, or accepted and drafts "
    "(lines over 16 KiB are not offered to it; 0.1 s of CPU a line, see README).",
)
@click.option(
    "--convention",
    type=click.Choice(["tokens-per-step", "accepted-per-step"]),
    help="What --pattern's accept_len (or tokens/cycles) counts: bonus token included, or accepted drafts only.",
)
@click.option("--min-accept-len", type=P.ACCEPT_LEN, help="The bar (tokens per verify step); below it exit code 1.")
@click.option("--show", type=P.SHOW, default=10, show_default=True, help="Windows listed at each end of the table.")
@click.option("--plot", "plot_file", type=P.Path(), help="Also draw accept length over time, events marked (PNG).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report (schemas/logs-report.schema.json).")
def logs_cmd(
    files: tuple[str, ...],
    pattern: str | None,
    convention: str | None,
    min_accept_len: float | None,
    show: int,
    plot_file: str | None,
    as_json: bool,
) -> None:
    """Read SGLang and vLLM server logs: what they say about speculative decoding.

    FILES are server logs (- for stdin; gzip, known by its magic bytes, read as it decompresses), oldest first.
    Prints the engine and release, each logged window, the merged accept length (exact
    from vLLM's counts or SGLang's request log, estimated from SGLang's decode lines), the
    events (start, drafter class built, weight updates, restarts, warmup, the error that
    ended the server) and a verdict. Exit codes as verify's.

    \b
    Examples:
      ckpt logs sglang.log --min-accept-len 2.5
      ckpt logs vllm.log.1.gz vllm.log --json
      ckpt logs prof.log --pattern '\\((?P<cycles>\\d+) cycles, (?P<tokens>\\d+) tok' --convention accepted-per-step
    """
    if plot_file:
        from ckpttools.io.guard import check_output

        check_output(plot_file)
    from ckpttools.measuring.logs import read_logs

    rep = read_logs(list(files), pattern=pattern, convention=convention, min_accept_len=min_accept_len)
    if plot_file:
        from ckpttools.measuring.plot import plot_logs

        plot_logs(rep, plot_file)
    _show(rep, as_json, "render_logs", show=show)
    if rep.accept_length is None:
        click.echo(f"ckpt: error: {rep.verdict}", err=True)
        click.echo("ckpt: hint: give the server's own log (SGLang or vLLM), or --pattern for a custom line", err=True)
    sys.exit(rep.exit_code)


# ---------------------------------------------------------------------------- quantize
@cli.command("quantize", epilog=EXIT_CODES_HELP)
@click.argument("drafter")
@click.option("-o", "--output", "out", required=True, type=P.Path(), help="Output directory (written atomically).")
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
    "only where the release serves that at the scheme's granularity, else dynamic.",
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


from ckpttools.cli.serve_cmds import register as _register_serve  # noqa: E402

_register_serve(cli)  # ckpt serve, ckpt swap (ckpttools/cli/serve_cmds.py)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        rv = cli.main(args=argv, prog_name="ckpt", standalone_mode=False)
    except click.UsageError as e:  # an unknown command or a bad top-level flag
        _usage_error(e)
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("ckpt: error: interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
