"""Quantized drafters: which scheme a checkpoint is in, which weights it quantizes, and where
their scales live, read from config.json's ``quantization_config`` and the safetensors headers.

Three layouts are recognized, each fact read from the format's own code (paths inside the
wheels of ``compressed-tensors`` 0.20 and ``nvidia-modelopt`` 0.47.0, downloaded 2026-12-02):

- **compressed-tensors** (llm-compressor): ``quant_method: "compressed-tensors"``
  (quantization/quant_config.py:127, 164), ``format`` ``float-quantized`` or ``naive-quantized``
  for FP8 weights (config/base.py:25-26), ``config_groups`` of ``targets`` + ``weights``
  (``num_bits``, ``type``, ``strategy``, ``block_structure``) and ``ignore``
  (quant_config.py:157-169). A target is a class name (``Linear``: every linear module,
  utils/match.py:448-462), ``re:PATTERN`` (``re.match`` on the module name) or an exact name
  (utils/match.py:442-445). Scales sit beside the weight as ``MODULE.weight_scale``
  (compressors/naive_quantized/base.py:36-43), shaped by the strategy
  (quantization/lifecycle/initialize.py:214-247): ``tensor`` (1,), ``channel`` (out, 1),
  ``group`` (out, ceil(in/g)), ``block`` (ceil(out/bn), ceil(in/bk)); a scale's dtype is the
  weight's float dtype, else float16 (initialize.py:259-267). Dequantized as value x scale
  (quantization/lifecycle/forward.py:73-108).
- **ModelOpt**: ``quant_method: "modelopt"`` (torch/export/convert_hf_config.py:280) with
  ``quant_algo`` ``FP8`` and ``ignore`` (convert_hf_config.py:262-266), or the older
  ``hf_quant_config.json`` form ``{"quantization": {"quant_algo", "exclude_modules"}}``. FP8 is
  per tensor: ``weight = (w / weight_scale).to(float8_e4m3fn)`` (torch/export/quant_utils.py:869-881),
  ``weight_scale = amax / 448`` with zeros set to 1 (quant_utils.py:79-102), plus a static
  ``input_scale``. An EAGLE export may carry them ("quantized eagle are allowed to have
  scales", torch/export/plugins/hf_spec_export.py:157).
- **FP8 with block scales** (DeepSeek-V3's layout): ``quant_method: "fp8"``, ``weight_block_size``
  ``[bn, bk]`` (usually 128 x 128) and ``MODULE.weight_scale_inv`` of shape
  (ceil(out/bn), ceil(in/bk)), float32, multiplied in despite its name; without a block size
  the scale is one per tensor, ``MODULE.weight_scale``. (Read from the engines' loaders, which
  are the format's only specification: cited in ckpttools/engines/quant_rules.py.)

FP8 E4M3 holds values up to 448 (compressed_tensors quantization/quant_args.py:90-96,
``torch.finfo(torch.float8_e4m3fn)``), E5M2 up to 57344.

:func:`read_scheme` is pure: config and headers in, a :class:`QuantScheme` out, with every
disagreement as a :class:`QuantProblem` (nothing is raised for a bad checkpoint).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "FP8_DTYPES",
    "FP8_MAX",
    "SCALE_SUFFIXES",
    "FORMATS",
    "QuantWeight",
    "QuantProblem",
    "QuantScheme",
    "read_scheme",
    "scale_name",
    "module_of",
    "expected_scale_shape",
]

FP8_DTYPES = ("F8_E4M3", "F8_E5M2")
FP8_MAX = {"F8_E4M3": 448.0, "F8_E5M2": 57344.0}
#: weight scale, block scale, static activation scale, zero point (asymmetric: not FP8's)
SCALE_SUFFIXES = (".weight_scale_inv", ".weight_scale", ".input_scale", ".weight_zero_point")
SCALE_DTYPES = ("F32", "BF16", "F16", "F64")
FORMATS = ("compressed-tensors", "modelopt", "fp8-block", "fp8-per-tensor")
#: the most config groups / ignore entries / targets read before the config is called unreasonable
MAX_ENTRIES = 4096
_STRATEGIES = ("tensor", "channel", "group", "block")


@dataclass
class QuantProblem:
    """One disagreement: ``id`` (quant.missing_scale, quant.scale_shape, quant.scale_dtype,
    quant.config, quant.config_mismatch, quant.orphan_scale, quant.block), the tensor or config
    path it concerns, and what is wrong."""

    id: str
    location: str
    message: str
    severity: str = "error"


@dataclass
class QuantWeight:
    """One 2-D weight and its quantization as the files hold it."""

    weight: str
    module: str
    dtype: str
    shape: list[int]
    scale: str | None = None
    scale_dtype: str | None = None
    scale_shape: list[int] | None = None
    granularity: str | None = None  # tensor, channel, group, block (None: not quantized)
    block: list[int] | None = None
    input_scale: str | None = None
    configured: str | None = None  # the strategy quantization_config gives it (None: unquantized there)

    @property
    def quantized(self) -> bool:
        return self.dtype in FP8_DTYPES


@dataclass
class QuantScheme:
    """What quantization a drafter holds: ``format`` one of :data:`FORMATS` (None: no quantized
    weight and no quantization_config), the config as read, the weights, the scales, the problems."""

    format: str | None
    config: dict[str, Any] | None
    config_source: str | None
    weights: list[QuantWeight] = field(default_factory=list)
    scales: list[str] = field(default_factory=list)
    problems: list[QuantProblem] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    block: list[int] | None = None
    bytes_on_disk: int = 0
    bytes_bf16: int = 0
    rules: Any = field(default=None, repr=False, compare=False)  # the config read as rules (_Rules)

    def engine_strategy(self, names: tuple[str, ...], class_linear: bool) -> str | None:
        """The strategy quantization_config gives a layer an engine names ``names`` (None: unquantized)."""
        return self.rules.engine_strategy(names, class_linear)[0] if self.rules is not None else None

    @property
    def quantized(self) -> list[QuantWeight]:
        return [w for w in self.weights if w.quantized]

    @property
    def granularities(self) -> list[str]:
        return sorted({w.granularity for w in self.quantized if w.granularity})

    def weight(self, module: str) -> QuantWeight | None:
        return next((w for w in self.weights if w.module == module), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "config_source": self.config_source,
            "granularity": self.granularities,
            "block": self.block,
            "ignore": self.ignore,
            "quantized": [asdict(w) for w in self.quantized],
            "unquantized": [w.weight for w in self.weights if not w.quantized],
            "scales": self.scales,
            "bytes_on_disk": self.bytes_on_disk,
            "bytes_bf16": self.bytes_bf16,
            "problems": [asdict(p) for p in self.problems],
        }


def module_of(name: str) -> str | None:
    """``layers.0.mlp.up_proj`` for ``layers.0.mlp.up_proj.weight`` (or any of its scales); None otherwise."""
    for suf in (*SCALE_SUFFIXES, ".weight"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return None


def scale_name(weight: str, fmt: str | None) -> str:
    """The scale tensor's name for ``weight`` (``X.weight``) in ``fmt``."""
    base = weight[: -len(".weight")] if weight.endswith(".weight") else weight
    return base + (".weight_scale_inv" if fmt == "fp8-block" else ".weight_scale")


def expected_scale_shape(granularity: str, shape: list[int], block: list[int] | None = None) -> list[int] | None:
    """The scale's shape for a weight [out, in] (compressed-tensors initialize.py:214-247; the block
    layout's (ceil(out/bn), ceil(in/bk))). None where it cannot be said (a group or block size missing)."""
    out, inp = (shape + [1, 1])[:2]
    if granularity == "tensor":
        return [1]
    if granularity == "channel":
        return [out, 1]
    if granularity in ("block", "group") and block:
        bn, bk = (1, block[-1]) if granularity == "group" else (block[0], block[1])
        if bn <= 0 or bk <= 0:
            return None
        return [math.ceil(out / bn), math.ceil(inp / bk)]
    return None


def _granularity_of(scale_shape: list[int], shape: list[int], block: list[int] | None) -> str:
    """The granularity a scale's shape shows for a weight [out, in]."""
    n = math.prod(scale_shape)
    out = shape[0] if shape else 1
    if n == 1 and not (block and len(scale_shape) == 2 and out <= block[0]):
        return "tensor"
    if scale_shape in ([out, 1], [out]):
        return "channel"
    if len(scale_shape) == 2:
        return "block"
    return "unknown"


Headers = Mapping[str, tuple[list[int], str]]


def read_scheme(config: Mapping[str, Any] | None, headers: Headers) -> QuantScheme:
    """The quantization of a drafter from its config.json and tensor headers ({name: (shape, dtype)}).

    Every problem is reported in ``problems``; nothing is raised.

    Example:
        >>> s = read_scheme({}, {"fc.weight": ([4, 12], "BF16")})
        >>> s.format is None
        True
    """
    cfg = config if isinstance(config, Mapping) else {}
    qc, where = _find_config(cfg)
    scheme = QuantScheme(None, qc if isinstance(qc, dict) else None, where)
    rules = _config_rules(qc, where, scheme)
    scheme.rules = rules
    _read_weights(headers, scheme, rules)
    if scheme.format is None and scheme.quantized:
        scheme.format = "fp8-block" if any(w.scale and w.scale.endswith("_inv") for w in scheme.quantized) else None
        scheme.problems.append(
            QuantProblem(
                "quant.config_mismatch",
                "config.json",
                f"{len(scheme.quantized)} weights are FP8 but config.json has no quantization_config: an engine "
                "loads them as plain floats, without their scales",
            )
        )
    return scheme


def _find_config(cfg: Mapping[str, Any]) -> tuple[Any, str | None]:
    for key, where in (
        ("quantization_config", "$.quantization_config"),
        ("compression_config", "$.compression_config"),
    ):
        if key in cfg:
            return cfg[key], where
    tc = cfg.get("text_config")
    if isinstance(tc, Mapping) and "quantization_config" in tc:
        return tc["quantization_config"], "$.text_config.quantization_config"
    return None, None


@dataclass
class _Rules:
    """How a config assigns a strategy to a module: None = unquantized."""

    groups: list[tuple[list[str], str, list[int] | None]] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    default: str | None = None  # modelopt / fp8: every linear module but the ignored ones
    block: list[int] | None = None
    glob_ignore: bool = False

    def strategy(self, module: str) -> tuple[str | None, list[int] | None]:
        """The format's own reading: the file's module name, bare or with ``model.``; the class target
        ``Linear`` matches every 2-D weight (lm_head and fc are torch Linear layers where the format is made)."""
        bare = module[len("model.") :] if module.startswith("model.") else module
        return self.engine_strategy((module, bare), True)

    def engine_strategy(self, names: tuple[str, ...], class_linear: bool) -> tuple[str | None, list[int] | None]:
        """An engine's reading: ``names`` are the layer's names in the engine (exact or ``re:`` matches);
        ``class_linear``: whether the engine's layer class matches the class target ``Linear``."""
        if any(_matches(p, n, self.glob_ignore) for p in self.ignore for n in names):
            return None, None
        for targets, strat, block in self.groups:
            if any(_matches(t, n, False) for t in targets for n in names) or (class_linear and "Linear" in targets):
                return strat, block
        return (self.default, self.block) if self.default else (None, None)


def _matches(pattern: str, name: str, glob: bool) -> bool:
    if not isinstance(pattern, str):
        return False
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], name) is not None
        except re.error:
            return False
    if glob and "*" in pattern:
        return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), name) is not None
    return pattern == name or (glob and name.split(".")[-1] == pattern)


def _config_rules(qc: Any, where: str | None, scheme: QuantScheme) -> _Rules | None:
    """Read quantization_config into rules; problems for what cannot be read."""
    if qc is None:
        return None

    def bad(msg: str) -> None:
        scheme.problems.append(QuantProblem("quant.config", where or "config.json", msg))

    if not isinstance(qc, dict):
        bad(f"quantization_config is {type(qc).__name__}, not an object")
        return None
    method = qc.get("quant_method")
    if method == "compressed-tensors" or method == "compressed_tensors":
        scheme.format = "compressed-tensors"
        return _ct_rules(qc, bad, scheme)
    if method == "modelopt" or (method is None and ("quant_algo" in qc or "quantization" in qc)):
        scheme.format = "modelopt"
        return _modelopt_rules(qc, bad, scheme)
    if method == "fp8":
        return _fp8_rules(qc, bad, scheme)
    bad(f"quant_method {str(method)[:40]!r} is not one ckpttools reads (compressed-tensors, modelopt, fp8)")
    return None


def _str_list(v: Any, what: str, bad: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or len(v) > MAX_ENTRIES:
        bad(f"{what} must be a list of at most {MAX_ENTRIES} strings")
        return []
    return list(v)


def _block_of(v: Any, what: str, bad: Any) -> list[int] | None:
    if v is None:
        return None
    if (
        not isinstance(v, list)
        or len(v) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1 << 20 for x in v)
    ):
        bad(f"{what} must be two positive whole numbers, [rows, columns]")
        return None
    return list(v)


def _ct_rules(qc: dict[str, Any], bad: Any, scheme: QuantScheme) -> _Rules | None:
    rules = _Rules(ignore=_str_list(qc.get("ignore"), "ignore", bad))
    scheme.ignore = rules.ignore
    fmt = qc.get("format")
    if fmt not in (None, "float-quantized", "naive-quantized"):
        bad(f"format {str(fmt)[:40]!r}: ckpttools reads FP8 weights stored as float-quantized or naive-quantized")
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups or len(groups) > MAX_ENTRIES:
        bad(f"config_groups must be an object of 1 to {MAX_ENTRIES} groups")
        return rules
    for gname, g in groups.items():
        at = f"config_groups.{str(gname)[:40]}"
        if not isinstance(g, dict):
            bad(f"{at} is not an object")
            continue
        targets = _str_list(g.get("targets"), f"{at}.targets", bad)
        w = g.get("weights")
        if w is None:
            continue
        if not isinstance(w, dict):
            bad(f"{at}.weights is not an object")
            continue
        strat = w.get("strategy")
        if w.get("num_bits") != 8 or w.get("type") != "float":
            bad(f"{at}.weights is {w.get('num_bits')!r}-bit {str(w.get('type'))[:20]!r}: ckpttools reads 8-bit float")
            continue
        if strat not in _STRATEGIES:
            bad(f"{at}.weights.strategy {str(strat)[:20]!r} is not one of {', '.join(_STRATEGIES)}")
            continue
        if w.get("symmetric") is False:
            bad(f"{at}.weights is asymmetric (a zero point): FP8 weights are symmetric")
        block = _block_of(w.get("block_structure"), f"{at}.weights.block_structure", bad) if strat == "block" else None
        if strat == "group":
            gs = w.get("group_size")
            block = [1, gs] if isinstance(gs, int) and not isinstance(gs, bool) and gs > 0 else None
            if block is None:
                bad(f"{at}.weights.group_size must be a positive whole number")
        if strat == "block" and block is None:
            bad(f"{at}.weights.block_structure is missing for strategy block")
        rules.groups.append((targets, str(strat), block))
        scheme.block = scheme.block or block
    return rules


def _modelopt_rules(qc: dict[str, Any], bad: Any, scheme: QuantScheme) -> _Rules | None:
    algo = qc.get("quant_algo")
    ignore = qc.get("ignore")
    nested = qc.get("quantization")
    if algo is None and isinstance(nested, dict):
        algo, ignore = nested.get("quant_algo"), nested.get("exclude_modules")
    if algo != "FP8":
        bad(f"quant_algo {str(algo)[:40]!r}: ckpttools reads ModelOpt FP8 (per tensor) only")
        return None
    rules = _Rules(ignore=_str_list(ignore, "ignore", bad), default="tensor", glob_ignore=True)
    scheme.ignore = rules.ignore
    return rules


def _fp8_rules(qc: dict[str, Any], bad: Any, scheme: QuantScheme) -> _Rules | None:
    block = _block_of(qc.get("weight_block_size"), "weight_block_size", bad)
    if "weight_block_size" in qc and block is None:
        return None
    ignore = _str_list(qc.get("ignored_layers", qc.get("modules_to_not_convert")), "ignored_layers", bad)
    scheme.format = "fp8-block" if block else "fp8-per-tensor"
    scheme.block, scheme.ignore = block, ignore
    if block and qc.get("activation_scheme", "dynamic") != "dynamic":
        bad("block-quantized FP8 takes activation_scheme dynamic only")
    return _Rules(ignore=ignore, default="block" if block else "tensor", block=block, glob_ignore=True)


def _read_weights(headers: Headers, scheme: QuantScheme, rules: _Rules | None) -> None:
    names = set(headers)
    used: set[str] = set()
    for name, (shape, dtype) in headers.items():
        n = math.prod(shape) if shape else 1
        is_scale = any(name.endswith(s) for s in SCALE_SUFFIXES)
        scheme.bytes_on_disk += n * _SIZE.get(dtype, 4)
        scheme.bytes_bf16 += n * (
            0 if is_scale else 2 if dtype in (*FP8_DTYPES, "F32", "F16", "BF16", "F64") else _SIZE.get(dtype, 4)
        )
        if is_scale:
            scheme.scales.append(name)
        if not name.endswith(".weight") or len(shape) != 2 or ("embed_tokens" in name and dtype not in FP8_DTYPES):
            continue
        mod = name[: -len(".weight")]
        strat, block = rules.strategy(mod) if rules else (None, None)
        w = QuantWeight(name, mod, dtype, list(shape), configured=strat, block=block)
        for suf in (".weight_scale_inv", ".weight_scale"):
            if mod + suf in names:
                w.scale = mod + suf
                w.scale_shape, w.scale_dtype = list(headers[mod + suf][0]), headers[mod + suf][1]
                used.add(mod + suf)
                break
        if mod + ".input_scale" in names:
            w.input_scale = mod + ".input_scale"
            used.add(w.input_scale)
        if mod + ".weight_zero_point" in names:
            used.add(mod + ".weight_zero_point")
        _judge(w, scheme)
        scheme.weights.append(w)
    for s in scheme.scales:
        if s not in used:
            scheme.problems.append(
                QuantProblem("quant.orphan_scale", s, "a scale with no 2-D weight of its module", "warning")
            )


_SIZE = {"F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4}
_SIZE.update({"I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8})


def _judge(w: QuantWeight, scheme: QuantScheme) -> None:
    """The weight against its scale and against quantization_config."""
    p = scheme.problems
    if not w.quantized:
        if w.configured and scheme.config is not None:
            p.append(
                QuantProblem(
                    "quant.config_mismatch",
                    w.weight,
                    f"quantization_config quantizes {w.module} ({w.configured}), but the tensor is {w.dtype}",
                )
            )
        if w.scale:
            p.append(
                QuantProblem(
                    "quant.orphan_scale", w.scale, f"a scale beside {w.weight}, which is {w.dtype}, not FP8", "warning"
                )
            )
        return
    if w.scale is None or w.scale_shape is None:
        p.append(
            QuantProblem("quant.missing_scale", w.weight, f"{w.weight} is {w.dtype} with no weight_scale beside it")
        )
        return
    if w.scale_dtype not in SCALE_DTYPES:
        p.append(
            QuantProblem(
                "quant.scale_dtype", w.scale, f"{w.scale} is {w.scale_dtype}; a scale is float32, bfloat16 or float16"
            )
        )
    w.granularity = _granularity_of(w.scale_shape, w.shape, w.block or scheme.block)
    if w.granularity == "block" and w.block is None:
        w.block = scheme.block
    if scheme.config is not None and w.configured is None:
        p.append(
            QuantProblem(
                "quant.config_mismatch",
                w.weight,
                f"{w.weight} is {w.dtype}, but quantization_config leaves {w.module} unquantized (ignored or untargeted)",
            )
        )
        return
    want_g = w.configured or w.granularity
    want = expected_scale_shape(want_g, w.shape, w.block or scheme.block)
    if want_g in ("block", "group") and w.block:
        _block_fit(w, scheme)
    got = w.scale_shape
    fits = (
        got == want
        or (want == [1] and math.prod(got) == 1 and len(got) <= 1)
        or (want_g == "channel" and got == [w.shape[0]])
    )
    if want is not None and not fits:
        how = f"quantization_config says {w.configured}" if w.configured else f"a {w.granularity} scale"
        p.append(
            QuantProblem(
                "quant.scale_shape",
                w.scale,
                f"{w.scale} is {got}, but {how} for {w.weight} {w.shape} means {want}",
            )
        )


def _block_fit(w: QuantWeight, scheme: QuantScheme) -> None:
    assert w.block is not None
    bn, bk = w.block
    if w.shape[1] % bk or w.shape[0] % bn:
        scheme.problems.append(
            QuantProblem(
                "quant.block",
                w.weight,
                f"{w.weight} {w.shape} is not a whole number of {bn}x{bk} blocks: the last blocks are partial",
                "warning",
            )
        )
