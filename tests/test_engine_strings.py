"""--engine values (issue 31): parsed in linear time whatever their length, names matched exactly (a
near miss is refused naming the one meant, never turned into a pinned release), and versions PEP 440."""

from __future__ import annotations

import random
import time

import pytest

from ckpttools.engines import releases as R
from ckpttools.engines.releases import (
    SGLANG_0_5_17,
    SGLANG_0_5_23,
    VLLM_0_32,
    VLLM_0_33,
    release_from_version_string,
    resolve,
    split_spec,
)
from ckpttools.errors import ConfigError
from ckpttools.measuring.verify import split_engine

MIB = 1 << 20
#: what one parse of a 1 MiB value may take: a linear scan is milliseconds; the old pattern took minutes
BOUND_S = 0.5

#: values that make a backtracking pattern quadratic or worse: long runs a repeat can split many ways,
#: followed by the one character that makes the whole match fail
ADVERSARIAL = {
    "name-run": "a" * MIB + "!",
    "spaces-after-name": "sglang" + " " * MIB + "!",
    "spaces-around": " " * (MIB // 2) + "sglang" + " " * (MIB // 2) + "!",
    "version-digits": "sglang==0" + "0" * MIB + "!",
    "version-dots": "sglang==0" + ".1" * (MIB // 2) + "!",
    "version-suffixes": "sglang==0.5.17" + ".post1" * (MIB // 6) + "!",
    "version-local": "vllm==0.32.0+" + "a." * (MIB // 2) + "!",
    "version-spaces": "sglang==" + " " * MIB + "0.5.17 x",
    "separators": "==" * (MIB // 2),
    "ats": "sglang" + "@" * MIB,
}


def _timed(fn: object, *args: object) -> float:
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        fn(*args)  # type: ignore[operator]
    took = time.perf_counter() - t0
    assert len(str(e.value)) < 600, "the message must not echo the value"
    return took


@pytest.mark.parametrize("tag", list(ADVERSARIAL))
def test_a_1mib_engine_value_is_refused_in_linear_time(tag: str) -> None:
    value = ADVERSARIAL[tag]
    assert len(value) > MIB - 8
    for fn, args in (
        (resolve, (value,)),
        (split_spec, (value,)),
        (split_engine, (value,)),
        (release_from_version_string, ("sglang", value)),
    ):
        took = _timed(fn, *args)
        assert took < BOUND_S, f"{fn.__name__}({tag}): {took:.2f}s"


@pytest.mark.parametrize("tag", list(ADVERSARIAL))
def test_the_version_scanner_itself_is_linear(tag: str) -> None:
    """The PEP 440 scanner on 1 MiB, without the length bound in front of it: linear on its own."""
    text = ADVERSARIAL[tag].partition("==")[2] or ADVERSARIAL[tag]
    t0 = time.perf_counter()
    assert R._scan_pep440(text) is None
    assert time.perf_counter() - t0 < BOUND_S


def test_the_version_scanner_agrees_with_pep_440() -> None:
    """Against packaging's reading of PEP 440 (its Version), on strings built from the grammar's own
    pieces; a fixed seed, so the same strings every run."""
    version = pytest.importorskip("packaging.version")
    InvalidVersion, Version = version.InvalidVersion, version.Version
    rng = random.Random(31)
    toks = ["0", "1", "12", ".", "-", "_", "+", "!", "v", "a", "b", "c", "rc", "alpha", "pre", "post", "r", "dev", "x"]
    for _ in range(20000):
        s = "".join(rng.choice(toks) for _ in range(rng.randint(1, 9)))
        try:
            Version(s)
            valid = True
        except InvalidVersion:
            valid = False
        assert (R._scan_pep440(s) is not None) == valid, s


@pytest.mark.parametrize(
    "value, meant",
    [
        ("SGLang", "sglang"),
        ("sgl", "sglang"),
        (" sglang", "sglang"),
        ("sglang ", "sglang"),
        ("VLLM", "vllm"),
        ("tensorrt-llm", "trtllm"),
        ("sglng", "sglang"),
        ("SGLang==0.5.17", "sglang"),
        ("sglang ==0.5.17", "sglang"),
    ],
)
def test_a_near_miss_is_refused_naming_the_one_meant(value: str, meant: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve(value)
    msg = str(e.value)
    assert f"did you mean {meant!r}" in msg and "known: sglang, vllm, trtllm" in msg
    assert e.value.hint and "NAME==VERSION" in e.value.hint


@pytest.mark.parametrize("value", ["SGLang", "sgl", " sglang", "Vllm", "Auto", "TORCH", "vllm\n"])
def test_verify_takes_no_near_miss_as_a_pinned_release(value: str) -> None:
    """A near miss once became (sglang, the newest table): a pinned release, so no swap route and
    no target check with several drafters. Now it is refused, naming verify's own names."""
    with pytest.raises(ConfigError) as e:
        split_engine(value)
    assert "known: auto, torch, sglang, vllm" in str(e.value)


@pytest.mark.parametrize("name", ["auto", "torch", "sglang", "vllm"])
def test_verify_bare_names_stay_unpinned(name: str) -> None:
    assert split_engine(name) == (name, None)


def test_verify_pins_only_a_server_engine() -> None:
    assert split_engine("sglang==0.5.17") == ("sglang", SGLANG_0_5_17)
    assert split_engine("vllm@0.32.0+cpu") == ("vllm", VLLM_0_32)
    for value in ("auto==0.5.17", "torch@1.0", "trtllm==1.2"):
        with pytest.raises(ConfigError):
            split_engine(value)


@pytest.mark.parametrize(
    "version, want",
    [
        ("0.5.17", SGLANG_0_5_17),
        ("v0.5.17", SGLANG_0_5_17),
        ("0.5.17.post1", SGLANG_0_5_17),
        ("0.5.17post1", SGLANG_0_5_17),
        ("0.5.17rc1", SGLANG_0_5_17),
        ("0.5.17.dev3", SGLANG_0_5_17),
        ("0.5.17+cu128", SGLANG_0_5_17),
        ("0.5.17rc1.post2.dev3+local.1", SGLANG_0_5_17),
        ("0.5.23", SGLANG_0_5_23),
    ],
)
def test_pep440_versions_name_their_table(version: str, want: object) -> None:
    assert resolve(f"sglang=={version}") is want
    assert release_from_version_string("sglang", version) is want


@pytest.mark.parametrize(
    "version",
    [
        "0.5.17.dev.post.rc.a.b",
        "0.5.17.post1.post2",
        "0.5.17.dev1.rc1",
        "0.5..17",
        "0.5.17.",
        "0.5.17-",
        "0.5.17+",
        "0.5.17 x",
        "1!0.5.17",
        "0.5.17.0.1",
        "latest",
    ],
)
def test_other_versions_are_refused_with_the_known_releases(version: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve(f"sglang=={version}")
    assert "known: sglang==0.5.17, sglang==0.5.23" in str(e.value)


def test_vllm_tables_are_minor_keyed() -> None:
    assert resolve("vllm==0.32") is VLLM_0_32 and resolve("vllm==0.32.4") is VLLM_0_32
    assert resolve("vllm==0.33.0.post1") is VLLM_0_33
    for v in ("0.32.0.1", "0.3", "0.34"):
        with pytest.raises(ConfigError):
            resolve(f"vllm=={v}")
