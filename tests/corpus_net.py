"""The network corpus: hostile engines (``{srv}``: tests/fake_servers.py MisbehavingServer)
and a hostile Hub (``{hub}``: tests/local_hub.py with a repo per hostile mode), each met by
the real CLI in a subprocess. Every case ends in time, with one error line at most.

Exit codes chosen: a broken answer to one /generate (or /v1/completions) request is that
request's failure, so a run where every request failed measured nothing (3); a broken
answer while connecting (/server_info, /v1/models, /metrics) is an error (2); impossible
figures in any one request make the run an error (2), never a mixed success. Every
hostile Hub answer is an error (2); a Hub that ignores Range, or fails once, is served (0).
"""

from __future__ import annotations

from pathlib import Path

from tests.corpus import Case, both, copy_in

#: how the hostile Hub is reached; ``{hub}`` is replaced by the LocalHub URL
HUB_ENV = {
    "HF_ENDPOINT": "{hub}",
    "HF_HOME": "{hubhome}",  # its own cache: the offline cases' empty HF_HOME stays empty
    "HF_HUB_OFFLINE": "0",
    "HF_HUB_DOWNLOAD_TIMEOUT": "2",
    "CKPT_HUB_DEADLINE": "4",
    "HF_HUB_DISABLE_XET": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}
#: for the cases whose Hub answers (served plainly, or after one reset): deadlines that a loaded
#: 2-core machine meets (the short ones above are for the hostile modes, which must end fast; a
#: plain fetch under HUB_ENV once ran past its 4 s and failed the suite)
CALM_ENV = {**HUB_ENV, "HF_HUB_DOWNLOAD_TIMEOUT": "30", "CKPT_HUB_DEADLINE": "60"}

#: (repo-mode, expected exit of ``inspect org/d-MODE``)
INSPECT_MODES = {
    **{f"listing-{k}": 2 for k in ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated")},
    **{f"listing-{k}": 2 for k in ("malformed", "bad-sha", "bad-size", "not-object")},
    "listing-reset-once": 0,
    **{f"range-{k}": 2 for k in ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated")},
    **{f"range-{k}": 2 for k in ("wrong-offset", "bad-header", "short")},
    "range-ignored": 0,
    "range-reset-once": 0,
    **{f"small-{k}": 2 for k in ("trickle", "endless", "html", "truncated")},
}


def hub_repos(base: Path) -> dict:
    """The repos the hostile Hub serves: the corpus's drafter ``d`` and target ``t``, plainly
    and once per hostile mode (``org/d-MODE``, ``org/t-MODE``)."""
    from tests.local_hub import MODES, Repo

    out: dict = {
        "org/d": Repo.from_dir(base / "d"),
        "org/t": Repo.from_dir(base / "t"),
        "org/sh": Repo.from_dir(base / "sh"),
    }
    for mode in MODES:
        out[f"org/d-{mode}"] = Repo.from_dir(base / "d", mode=mode)
        out[f"org/t-{mode}"] = Repo.from_dir(base / "t", mode=mode)
    return out


def _hub_cases() -> list[Case]:
    env, calm = dict(HUB_ENV), dict(CALM_ENV)
    out = [
        Case(f"hub-inspect-{m}", ["inspect", f"org/d-{m}"], code, env=calm if code == 0 else env)
        for m, code in INSPECT_MODES.items()
    ]
    for m in ("listing-html", "listing-malformed", "listing-trickle", "listing-redirect-loop"):
        out.append(Case(f"hub-validate-target-{m}", ["validate", "org/d", "--target", f"org/t-{m}"], 2, env=env))
    for m in ("range-wrong-offset", "range-short", "range-trickle", "range-gzip"):
        out.append(Case(f"hub-validate-{m}", ["validate", f"org/d-{m}"], 2, env=env))
    mapping = copy_in("m.safetensors")
    for m in ("rows-wrong-offset", "rows-short", "rows-bad-header", "rows-trickle", "range-html"):
        out.append(Case(f"hub-diff-vocab-{m}", ["diff-vocab", f"org/d-{m}", "m.safetensors"], 2, mapping, env=env))
    fill = ["--to", "m.safetensors", "--fill", "target", "-o", "out"]
    for m, code in (
        ("rows-wrong-offset", 2),
        ("rows-short", 2),
        ("rows-bad-header", 2),
        ("rows-trickle", 2),
        ("range-wrong-offset", 2),
        ("listing-html", 2),
    ):
        out.append(
            Case(f"hub-remap-fill-{m}", ["remap", "org/d", *fill, "--target", f"org/t-{m}"], code, mapping, "out", env)
        )
    out.append(Case("hub-remap-fill-ok", ["remap", "org/d", *fill, "--target", "org/t"], 0, mapping, "out", calm))
    out.append(Case("hub-diff-vocab-ok", ["diff-vocab", "org/d", "m.safetensors"], 0, mapping, env=calm))
    return out + _local_typo_cases(calm)


def _local_typo_cases(env: dict[str, str]) -> list[Case]:
    """A repo-id-shaped path whose first part is a directory here: a local path misspelt, said so when
    the Hub has no such repo (io/checkpoint.py ``local_typo``); served from the Hub when it has."""
    said = "org/d-nope: no such file or directory (org/ is a directory here; as a Hub repo id: "
    org = copy_in("d", "org")
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    return [
        Case("hub-local-typo-inspect", ["inspect", "org/d-nope"], 2, org, env=env, stderr_has=said),
        Case("hub-local-typo-inspect-offline", ["inspect", "org/d-nope"], 2, org, env=offline, stderr_has=said),
        Case(
            "hub-local-typo-target",
            ["validate", "d", "--target", "org/d-nope"],
            2,
            both(copy_in("d"), org),
            env=env,
            stderr_has=said,
        ),
        Case(
            "hub-local-typo-symlinked-dir",
            ["inspect", "org/d-nope"],
            2,
            both(copy_in("d"), lambda d, b: (d / "org").symlink_to("d")),
            env=env,
            stderr_has=said,
        ),
        Case(
            "hub-local-typo-first-part-a-file",
            ["inspect", "org/d-nope"],
            2,
            lambda d, b: (d / "org").write_text("x"),
            env=env,
            stderr_has="ckpt: error: org/d-nope: no such repo on the Hub",
        ),
        Case("hub-local-dir-and-hub-repo", ["inspect", "org/d"], 0, org, env=env, stdout_has="tensors"),
    ]


def _engine_cases() -> list[Case]:
    p = ["--prompts", "prompts.jsonl", "--num-prompts", "2", "--max-new-tokens", "8", "--timeout", "2"]
    prompts = copy_in("prompts.jsonl")
    out = []
    for mode, code in (
        *((f"sg-{k}", 3) for k in ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated", "nan")),
        *((f"sg-{k}", 2) for k in ("steps-gt-tokens", "hist-long", "acc-gt-prop", "zero-tokens", "1001")),
        *((f"sg-info-{k}", 2) for k in ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated")),
        ("sg-info-reset-once", 0),
    ):
        name = f"net-verify-{mode}" if mode != "sg-1001" else "net-verify-sg-1001-auto"
        extra = ["--engine", "sglang"] if mode.startswith("sg-info") else []
        out.append(Case(name, ["verify", "--host", "{srv}/" + mode, *p, *extra], code, prompts))
    for mode, code in (
        *((f"vl-{k}", 3) for k in ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated")),
        ("vl-steps-gt-tokens", 2),
        ("vl-acc-gt-prop", 2),
        ("vl-per-request-ok", 0),
        *((f"vl-models-{k}", 2) for k in ("trickle", "endless", "html", "gzip")),
        *((f"vl-metrics-{k}", 2) for k in ("trickle", "endless", "redirect-loop", "truncated")),
    ):
        argv = ["verify", "--engine", "vllm", "--host", "{srv}/" + mode, *p]
        out.append(Case(f"net-verify-{mode}", argv, code, both(prompts)))
    # a server that answers nothing within --timeout: three requests, then the run stops (exit 3, nothing
    # measured) and says how many of the 40 prompts went unmeasured, in about 3 x 0.5 s, not 40 x 0.5 s
    stall = ["verify", "--host", "{srv}/sg-timeout", "--prompts", "builtin", "--num-prompts", "40", "--timeout", "0.5"]
    out.append(Case("net-verify-sg-timeout-stops-after-three", stall, 3, stdout_has="37 prompt(s) not measured"))
    return out


def net_cases() -> list[Case]:
    """Every network case: the hostile Hub's, then the hostile engines'."""
    return _hub_cases() + _engine_cases()
