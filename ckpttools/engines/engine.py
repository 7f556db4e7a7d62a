"""Each serving engine as one object: SGLang, vLLM and the offline PyTorch probe.

An engine object is built from its release table (:mod:`ckpttools.engines.releases`; None where no
release is known yet, e.g. before a running server says its version) and knows what the rest of the
package used to ask by comparing engine names: how to start it (launch argv), when it is ready, which
release an interpreter has installed, how to flush its cache, how to read its acceptance figures,
how it takes another drafter (the swap mechanism its table records), how to digest its target, and
its log grammar. ``ops/``, ``measuring/`` and ``cli/`` ask :func:`engine_for` and never compare
names (tests/test_engine_branches.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckpttools.engines.claim_texts import VLLM_CPU_ATTN_HEAD_SIZES
from ckpttools.engines.claims import ENGINE_NAMES
from ckpttools.errors import CkptError, opt

if TYPE_CHECKING:
    from ckpttools.engines.opened import OpenedDrafter

#: a literal, then a bounded run of one class: linear in the text (tests/test_regex_linear.py)
_ACCEPT_LEN = re.compile(r"accept len: ([0-9.]{1,40})")

__all__ = [
    "Engine",
    "SGLang",
    "VLLM",
    "Torch",
    "engine_for",
    "engine_arg",
    "other_server_engine",
    "SERVER_ENGINES",
    "ENGINE_OBJECTS",
]


@dataclass(frozen=True)
class Engine:
    """What every engine answers; the subclasses fill it in from their release table."""

    release: Any = None  # an EngineRelease, or None: not known (yet)

    name: ClassVar[str] = ""
    #: the package(s) whose metadata gives the installed release
    dists: ClassVar[tuple[str, ...]] = ()
    #: the port a command written for a user listens on
    default_port: ClassVar[int] = 0
    #: a server ckpttools can start (the torch probe runs in this process)
    serves: ClassVar[bool] = True
    #: readiness: the path that answers 200 once the server serves
    health_path: ClassVar[str] = "/health"
    #: acceptance read from the server's counters (before and after), not only from each response
    reads_counters: ClassVar[bool] = False
    #: the cache flush also starts the acceptance counters from zero
    flush_resets_counters: ClassVar[bool] = False
    #: a tree of drafts (topk, draft tokens) rather than a chain
    drafts_tree: ClassVar[bool] = False

    # what validate judges differently per engine (the texts and their sources: engines/claims.py)
    #: the SGLang claims (``sglang:...``) describe this engine's own reading
    reads_as_sglang: ClassVar[bool] = False
    #: one KV token count sizes the target's and the drafter's pools (``sglang:kv_pool``)
    shares_kv_token_count: ClassVar[bool] = False
    #: a drafter dtype other than the target's fails the load (``sglang:dtype.crash``)
    dtype_mismatch_crashes: ClassVar[bool] = False
    #: aux layer ids out of the target's reach crash the server (``sglang:aux.crash``)
    aux_out_of_reach_crashes: ClassVar[bool] = False
    #: a tensor name its loader does not know is dropped without a word (``ckpt validate --fix`` renames)
    drops_unknown_names_silently: ClassVar[bool] = False
    #: a drafter context shorter than the target's is raised, not refused (``vllm:context.*``)
    raises_short_context: ClassVar[bool] = False
    #: serves drafter architectures under its own class names only (``vllm:arch.wants``)
    wants_own_arch_names: ClassVar[bool] = False
    #: serves a Qwen3-architecture drafter (per-head q/k norms) in a class of its own
    serves_qk_norm_drafter: ClassVar[bool] = False
    #: builds an MLA drafter class whose fields validate checks (``mla.*``)
    checks_mla_fields: ClassVar[bool] = False
    #: its CPU build refuses some MLA sizes on a CPU with AMX (``cpu_mla.amx``)
    refuses_amx_mla_sizes: ClassVar[bool] = False
    #: its CPU build serves attention heads of these sizes only (``cpu_attn.head_size``); None: no such rule
    cpu_attention_head_sizes: ClassVar[tuple[int, ...] | None] = None
    #: ``ckpt fix`` repairs a drafter towards this engine's classes and names
    repaired_by_fix: ClassVar[bool] = False
    #: the claim that says what a missing tensor does (None: validate words it from SGLang's loader)
    missing_tensor_claim: ClassVar[str | None] = None

    def death_hint(self, first_error: str) -> str:
        """What to do about a launched server that died, given its log's first error line ("" if none)."""
        return "the first error it logged says why" if first_error else "its log says why"

    def sglang_said(self) -> str:
        """What a finding about SGLang's behaviour adds when this engine's reading is another's."""
        from ckpttools.engines.claims import label

        return "" if self.reads_as_sglang else f" (SGLang's behaviour; {label(self.name)}'s is not in its table)"

    @property
    def who(self) -> str:
        """The engine as a finding names it: ``SGLang``, or the applied release (``vLLM 0.32``)."""
        from ckpttools.engines.claims import label

        return ENGINE_NAMES.get(self.name, self.name) if self.reads_as_sglang else label(self.name)

    # ------------------------------------------------------------------ naming
    @property
    def label(self) -> str:
        """``SGLang 0.5.17`` (its release known) or ``SGLang``."""
        word = ENGINE_NAMES.get(self.name, self.name)
        return f"{word} {self.release.version}" if self.release is not None else word

    @property
    def spec(self) -> str:
        """``name==version`` when the release is known, else the bare name."""
        return self.release.spec if self.release is not None else self.name

    def with_release(self, release: Any) -> Engine:
        return type(self)(release)

    # ------------------------------------------------------------------ launching
    def flag_spellings(self) -> dict[str, Any]:
        """The release's other spellings of launch flags (releases.EngineRelease.flag_spellings): this
        object's release, else the one applied."""
        from ckpttools.engines.claims import applied

        rel = self.release if self.release is not None else applied(self.name)
        return dict(rel.flag_spellings.value)

    def launch_argv(self, s: Any) -> list[str]:
        """The server command line for a :class:`ckpttools.engines.launch.LaunchSpec`."""
        raise ValueError(f"cannot launch engine {self.name!r}")

    def installed_release(self, python: str) -> Any:
        """The release table of what ``python`` has installed (read before any launch), or None
        when the interpreter does not say."""
        from ckpttools.engines.releases import release_from_version_string

        if not self.dists:
            return None
        v = installed_version(python, self.name)
        return release_from_version_string(self.name, v) if v else None

    def table(self) -> Any:
        """The release table claims are read from: its own, else the newest known (None: no table)."""
        from ckpttools.engines.releases import ENGINES

        if self.release is not None:
            return self.release
        rels = ENGINES.get(self.name)
        return rels[-1] if rels else None

    def context_override_var(self) -> str | None:
        """The environment variable that makes the engine serve a drafter whose context is shorter than
        the target's (the table's ``context_override``; None: the engine has no such switch)."""
        rel = self.table()
        value = rel.context_override.value if rel is not None else None
        return value.partition("=")[0] if value else None

    def launch_int(self, engine_args: Sequence[str], what: str) -> int | None:
        """The whole number the engine arguments give the flag that sets ``what`` (``context``: the
        context served; ``kv_tokens``: the KV pools' token cap), read as this release reads it
        (``1k``, ``32Ki``: its table's ``int_flags``); None: not given, no positive number, or the
        table has no such flag."""
        from ckpttools.engines.arg_ints import read_int

        rel = self.table()
        flags = rel.int_flags.value if rel is not None else None
        if not flags or what not in flags:
            return None
        got = engine_arg(engine_args, flags[what])
        return None if got is None else read_int(flags["grammar"], got)

    def kv_token_cap(self, engine_args: Sequence[str]) -> int | None:
        """The KV token count the engine arguments cap the pools at (None: not given, or no such flag)."""
        return self.launch_int(engine_args, "kv_tokens")

    def context_cap(self, engine_args: Sequence[str]) -> int | None:
        """The context the engine arguments set the server to serve (None: not given, or no such flag)."""
        return self.launch_int(engine_args, "context")

    def sweep_setting_refused(self, setting: dict[str, int]) -> str | None:
        """Why a sweep setting cannot be launched on this engine (None: it can)."""
        return None

    def command_setting(self, spec: Any, setting: dict[str, int]) -> dict[str, Any]:
        """The spec fields a launch command for a user takes from a sweep setting."""
        return {"port": self.default_port, "topk": 1, "draft_tokens": None}

    # ------------------------------------------------------------------ measuring
    def client(self, url: str, net: Any) -> Any:
        """The HTTP client that reads this engine's answers."""
        raise ValueError(f"{self.name} has no HTTP client")

    def flush_cache(self, client: Any) -> None:
        """Empty the server's cache (a no-op where the engine has no such call)."""

    def per_request_counters(self, concurrency: int) -> bool:
        """Read the counters around each request (one at a time only)."""
        return False

    def server_avg_accept_length(self, client: Any) -> float | None:
        """The server's own average accept length, where it reports one."""
        return None

    # ------------------------------------------------------------------ its log
    def log_accept_lens(self, log_text: str) -> list[float] | None:
        """The accept lengths its own log lines give (None: its log carries none per line)."""
        return None

    def log_source(self) -> tuple[str, str]:
        """What ``ckpt logs`` read from this engine's log, and how the figure was merged."""
        return f"{self.name} log lines", "as the lines give it"

    # ------------------------------------------------------------------ swapping
    def swap_route(self) -> dict[str, Any] | None:
        """The release table's swap route (None: each drafter needs a server of its own)."""
        from ckpttools.engines.swap import swap_route

        return swap_route(self.release)

    def swap_in(
        self, net: Any, url: str, drafter: str | Path | OpenedDrafter, spec: dict[str, Any], ranks: int, timeout: float
    ) -> Any:
        """Another drafter into the running server, through the mechanism the table records (``drafter``:
        its directory, or the drafter opened already: :class:`ckpttools.engines.opened.OpenedDrafter`)."""
        from ckpttools.engines.swap import swap_in

        route = self.swap_route()
        if route is None:
            raise ValueError(f"{self.spec}: the engine-release table has no swap route")
        return swap_in(self.name, net, url, drafter, {**spec, "mechanism": route["mechanism"]}, ranks, timeout=timeout)

    def target_digest(
        self, net: Any, url: str, target: str | Path | None, spec: dict[str, Any], ranks: int, timeout: float
    ) -> Any:
        """Every target parameter digested where the weights live, through the swap route ``spec``
        (``server_spec``) records, with the mechanism the table records (``engines.swap.target_digest``:
        a ``TargetDigest``); None: the engine has no route to digest it. Raises ServerError where a
        read read nothing."""
        from ckpttools.engines.swap import target_digest

        route = self.swap_route()
        if route is None:
            return None
        return target_digest(net, url, {**spec, "mechanism": route["mechanism"]}, ranks, timeout=timeout)


def installed_version(python: str, engine: str) -> str | None:
    """The version of ``engine`` installed for ``python`` (its package metadata, read without
    importing the engine), or None when it cannot be read."""
    kind = ENGINE_OBJECTS.get(engine)
    dists = kind.dists if kind is not None and kind.dists else (engine,)
    code = (
        "import importlib.metadata as m\n"
        f"for d in {dists!r}:\n"
        "    try:\n        print(m.version(d)); break\n    except m.PackageNotFoundError: pass\n"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    v = out.stdout.strip().splitlines()
    return v[0] if out.returncode == 0 and v else None


def parse_sglang_accept_lens(log_text: str) -> list[float]:
    """The 'accept len: X' figures of SGLang's decode log lines, each read as an accept length
    (:mod:`ckpttools.io.figures`: decimal, in [1, 65]); text that is not one is left out."""
    from ckpttools.io import figures

    out = []
    for x in _ACCEPT_LEN.findall(log_text):
        try:
            out.append(float(figures.read(x, "length")))
        except figures.FigureError:
            continue
    return out


def engine_arg(engine_args: Sequence[str], flag: str) -> str | None:
    """The value given to ``flag`` in engine arguments (``--flag=V`` or ``--flag V``; the last wins)."""
    got = None
    for i, a in enumerate(engine_args):
        if a.startswith(flag + "="):
            got = a.partition("=")[2]
        elif a == flag and i + 1 < len(engine_args):
            got = engine_args[i + 1]
    return got


def _spec_flags_sglang(s: Any) -> list[str]:
    if s.drafter is None:
        return []
    n = s.draft_tokens or (s.steps + 1 if s.topk == 1 else s.steps * s.topk + 1)
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        s.drafter,
        "--speculative-num-steps",
        str(s.steps),
        "--speculative-eagle-topk",
        str(s.topk),
        "--speculative-num-draft-tokens",
        str(n),
    ]


@dataclass(frozen=True)
class SGLang(Engine):
    name: ClassVar[str] = "sglang"
    dists: ClassVar[tuple[str, ...]] = ("sglang",)
    default_port: ClassVar[int] = 30000
    flush_resets_counters: ClassVar[bool] = True
    drafts_tree: ClassVar[bool] = True
    reads_as_sglang: ClassVar[bool] = True
    shares_kv_token_count: ClassVar[bool] = True
    dtype_mismatch_crashes: ClassVar[bool] = True
    aux_out_of_reach_crashes: ClassVar[bool] = True
    drops_unknown_names_silently: ClassVar[bool] = True
    checks_mla_fields: ClassVar[bool] = True
    repaired_by_fix: ClassVar[bool] = True

    def launch_argv(self, s: Any) -> list[str]:
        base = [
            s.python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            s.target,
            *_spec_flags_sglang(s),
            "--tp-size",
            str(s.tp),
            "--host",
            s.host,
            "--port",
            str(s.port),
        ]
        _refuse_own_flags(base, s.engine_args, spellings=self.flag_spellings())
        return [*base, *s.engine_args]

    def command_setting(self, spec: Any, setting: dict[str, int]) -> dict[str, Any]:
        return {
            "port": self.default_port,
            "topk": setting.get("topk", spec.topk),
            "draft_tokens": setting.get("draft_tokens"),
        }

    def client(self, url: str, net: Any) -> Any:
        from ckpttools.engines.http import SGLangClient

        return SGLangClient(url, net)

    def flush_cache(self, client: Any) -> None:
        client.flush_cache()

    def server_avg_accept_length(self, client: Any) -> float | None:
        return client.server_avg_accept_length()  # type: ignore[no-any-return]

    def log_accept_lens(self, log_text: str) -> list[float] | None:
        return parse_sglang_accept_lens(log_text)

    def log_source(self) -> tuple[str, str]:
        return "sglang Decode batch lines", (
            "an estimate: each window weighted by its #running-req (a window is decode_log_interval passes over the "
            "running batch; the line gives no counts)"
        )


@dataclass(frozen=True)
class VLLM(Engine):
    name: ClassVar[str] = "vllm"
    dists: ClassVar[tuple[str, ...]] = ("vllm", "vllm-cpu")
    default_port: ClassVar[int] = 8000
    reads_counters: ClassVar[bool] = True
    raises_short_context: ClassVar[bool] = True
    wants_own_arch_names: ClassVar[bool] = True
    serves_qk_norm_drafter: ClassVar[bool] = True
    refuses_amx_mla_sizes: ClassVar[bool] = True
    cpu_attention_head_sizes: ClassVar[tuple[int, ...] | None] = VLLM_CPU_ATTN_HEAD_SIZES
    missing_tensor_claim: ClassVar[str | None] = "vllm:missing"

    def death_hint(self, first_error: str) -> str:
        """A head size its CPU build has no kernel for (``cpu_attn.head_size``) is named; else the KV
        space, what a CPU server most often dies of."""
        if "Unsupported CPU attention configuration" in first_error and self.cpu_attention_head_sizes:
            from ckpttools.engines.claims import claim

            return claim("vllm:cpu_attn.head_size_hint", sizes=", ".join(map(str, self.cpu_attention_head_sizes)))
        return "for vLLM's CPU build, a smaller VLLM_CPU_KVCACHE_SPACE may fit"

    def launch_argv(self, s: Any) -> list[str]:
        spec: dict[str, Any] = {"method": "eagle3", "model": s.drafter, "num_speculative_tokens": s.steps}
        given, engine_args = _given_speculative_config(s.engine_args)
        # the plain target (a baseline without speculation) is launched without the given config
        if given is not None and s.drafter is not None:
            clash = sorted(k for k in spec if k in given and given[k] != spec[k])
            if clash:
                raise CkptError(
                    f"--speculative-config in {opt('engine_args')} sets {', '.join(map(repr, clash))}, which "
                    f"ckpttools sets from the drafter and the steps ({json.dumps({k: spec[k] for k in clash})})",
                    hint="leave those keys out: give the drafter and the steps as options of their own",
                )
            # the user's other keys go with ours, e.g. "attention_backend" (the drafter's own attention
            # backend: vLLM picks it anew, never the target's --attention-backend; VLLM_CLAIMS "cpu_mla.amx_hint")
            spec |= given
        flags = [] if s.drafter is None else ["--speculative-config", json.dumps(spec)]
        if s.drafter is not None and not any(a.startswith("--per-request-spec-decode-metrics") for a in s.engine_args):
            # figures per request at any concurrency (vllm 0.32.0: vllm/config/observability.py:50-60)
            flags.append("--per-request-spec-decode-metrics=summary")
        base = [
            s.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            s.target,
            *flags,
            "--tensor-parallel-size",
            str(s.tp),
            "--host",
            s.host,
            "--port",
            str(s.port),
        ]
        _refuse_own_flags(
            base,
            engine_args,
            mergeable=("--speculative-config", "--per-request-spec-decode-metrics"),
            spellings=self.flag_spellings(),
        )
        return [*base, *engine_args]

    def sweep_setting_refused(self, setting: dict[str, int]) -> str | None:
        chain = setting.get("steps", 0) + 1
        if setting.get("topk", 1) > 1 or "draft_tokens" in setting and setting["draft_tokens"] != chain:
            return "vLLM's EAGLE-3 drafts a chain: only steps (num_speculative_tokens) applies"
        return None

    def client(self, url: str, net: Any) -> Any:
        from ckpttools.engines.http import VLLMClient

        return VLLMClient(url, net)

    def per_request_counters(self, concurrency: int) -> bool:
        return concurrency <= 1

    def log_source(self) -> tuple[str, str]:
        return (
            "vllm SpecDecoding metrics lines",
            "exact: 1 + sum(accepted tokens) / sum(drafts), drafts = drafted tokens / draft length",
        )


@dataclass(frozen=True)
class Torch(Engine):
    """The offline probe (:mod:`ckpttools.measuring.probe`): no server, one request at a time, topk 1."""

    name: ClassVar[str] = "torch"
    serves: ClassVar[bool] = False

    @property
    def label(self) -> str:
        return "PyTorch"

    def swap_route(self) -> dict[str, Any] | None:
        return None

    def target_digest(
        self, net: Any, url: str, target: str | Path | None, spec: dict[str, Any], ranks: int, timeout: float
    ) -> Any:
        return None


#: every engine object, by name
ENGINE_OBJECTS: dict[str, type[Engine]] = {"sglang": SGLang, "vllm": VLLM, "torch": Torch}
#: the engines that serve over HTTP
SERVER_ENGINES = tuple(n for n, c in ENGINE_OBJECTS.items() if c.serves)


def engine_for(name: str, release: Any = None) -> Engine:
    """The engine object for ``name`` (``sglang``, ``vllm``, ``torch``), with its release table if known.

    Raises:
        ValueError: no engine object of that name (``auto`` must be detected first).
    """
    cls = ENGINE_OBJECTS.get(name)
    if cls is None:
        raise ValueError(f"no engine object for {name!r}")
    return cls(release)


def other_server_engine(name: str) -> str:
    """The other server engine than ``name`` (SGLang's other is vLLM, and back)."""
    return next(n for n in SERVER_ENGINES if n != name)


#: the most bytes of a --speculative-config value read from the engine arguments
_MAX_SPEC_CONFIG = 64 << 10
#: the example the hints give
_SPEC_CONFIG_EXAMPLE = '{"attention_backend": "CPU_MLA"}'


def _refuse_own_flags(
    base: Sequence[str], given: Sequence[str], mergeable: tuple[str, ...] = (), spellings: Any = None
) -> None:
    """Refuse an engine argument that sets a flag ckpttools puts on the command line itself (the
    target, the drafter and the steps, the tensor parallel size, the host and the port): the engines
    parse their flags with argparse, where the last occurrence wins and an unambiguous prefix names
    a flag, so such an argument would silently override what ckpttools checked and reports (a
    drafter outside the swap root, another port). ``spellings``: the release table's other spellings
    of a flag (``flag_spellings``: aliases such as vLLM's ``-tp``, ``--a_b`` for ``--a-b``, vLLM's
    ``--flag.key``), each refused too, with argparse's prefixes of it. ``mergeable``: flags ckpttools
    merges with the user's (vLLM's ``--speculative-config``, checked by :func:`_given_speculative_config`),
    taken in their own spelling only."""
    sp = spellings or {}
    names = {f: f for f in (a.split("=", 1)[0] for a in base) if f.startswith("--")}
    for flag, others in (sp.get("aliases") or {}).items():
        if flag in names:
            names.update(dict.fromkeys(others, flag))
    for a in given:
        if not a.startswith("-") or a == "-" or a.lstrip("-").isdigit():
            continue
        name = a.split("=", 1)[0]
        spelled = name
        if sp.get("underscores") and name.startswith("--"):
            spelled = "--" + name[2:].replace("_", "-")
        if sp.get("dotted") and "." in spelled:
            spelled = spelled.split(".", 1)[0]
        long = spelled.startswith("--")
        hit = next(
            (f for n, f in names.items() if n == spelled or (long and len(spelled) > 3 and n.startswith(spelled))),
            None,
        )
        if hit is None or (hit in mergeable and name == hit):
            continue
        if hit in mergeable:
            raise CkptError(
                f"{opt('engine_args')} {a[:80]!r} sets {hit} in another spelling, which ckpttools would not see",
                hint=f"give it as {hit}=VALUE: ckpttools merges that with its own",
            )
        raise CkptError(
            f"{opt('engine_args')} {a[:80]!r} sets {hit}, which ckpttools sets itself",
            hint=f"give the target, the drafter, the steps, {opt('tp')}, {opt('host')} and {opt('port')} as options of their own",
        )


def _given_speculative_config(args: Sequence[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """A ``--speculative-config`` among vLLM engine arguments (``--speculative-config=JSON`` or
    ``--speculative-config JSON``): its JSON object, and the arguments without it; (None, the
    arguments) when there is none. vLLM reads the flag as a JSON object (vllm 0.32.0:
    engine/arg_utils.py:714 and 1828); given twice, argparse keeps the last, so two are refused."""
    from ckpttools.io.inputs import loads_json

    where = f"--speculative-config in {opt('engine_args')}"
    rest: list[str] = []
    found: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--speculative-config":
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise CkptError(
                    f"{where} has no value",
                    hint=f"give its JSON object in the same argument: --speculative-config={_SPEC_CONFIG_EXAMPLE}",
                )
            found.append(args[i + 1])
            i += 1
        elif a.startswith("--speculative-config="):
            found.append(a.split("=", 1)[1])
        else:
            rest.append(a)
        i += 1
    if not found:
        return None, rest
    if len(found) > 1:
        raise CkptError(
            f"{where}: given {len(found)} times", hint="give one --speculative-config, with every key in it"
        )
    text = found[0]
    if len(text.encode("utf-8", "surrogatepass")) > _MAX_SPEC_CONFIG:
        raise CkptError(f"{where}: longer than {_MAX_SPEC_CONFIG} bytes", hint="give a JSON object of a few keys")
    hint = f"give a JSON object, e.g. {_SPEC_CONFIG_EXAMPLE}"
    obj = loads_json(text, where, error=CkptError, hint=hint)
    if not isinstance(obj, dict):
        raise CkptError(f"{where}: a JSON object expected, got {type(obj).__name__}", hint=hint)
    return obj, rest
