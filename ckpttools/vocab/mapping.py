"""Vocabulary mappings between a drafter's reduced vocabulary and its target's.

``d2t`` is an offset table (``target_id = draft_id + d2t[draft_id]``, int64, length Vd)
and ``t2d`` a bool mask over the target vocabulary (True where a target token has a
draft slot). SGLang and vLLM read only d2t; trainers use t2d.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpttools.errors import CheckpointNotFoundError, MappingError, PickleRefusedError
from ckpttools.formats.config import MAX_VOCAB_SIZE
from ckpttools.formats.names import D2T_ALIASES

if TYPE_CHECKING:
    import numpy as np

    from ckpttools.io.checkpoint import Checkpoint

__all__ = ["VocabMapping", "MappingProblem", "load_mapping", "missing_mapping_message", "MAPPING_FILE_SUFFIXES"]

MAPPING_FILE_SUFFIXES = (".safetensors", ".npy", ".json", ".pt")
_MAPPING_HINT = (
    "give d2t/t2d as the drafter's tensors or a mapping file (.safetensors/.npy/.json), e.g. from `ckpt vocab build`"
)
_D2T_KEYS = ("d2t", *D2T_ALIASES)
_T2D_KEYS = ("t2d",)
_IDS_KEYS = ("ids", "target_ids", "token_ids", "draft_to_target_ids")


def missing_mapping_message(draft_vocab_size: int, vocab_size: int) -> str:
    """What the engines do, silently, with a reduced head and no d2t."""
    return (
        f"no d2t while draft_vocab_size {draft_vocab_size} < vocab_size {vocab_size}: SGLang will treat draft "
        "ids as target ids and vLLM will use the first Vd target ids; acceptance collapses with no error"
    )


@dataclass(frozen=True)
class MappingProblem:
    """One thing wrong (or notable) about a mapping."""

    code: str
    severity: str  # "error" | "warning" | "info"
    message: str
    location: str = "d2t"


@dataclass
class VocabMapping:
    """A draft-to-target vocabulary mapping.

    Build one with :meth:`from_d2t`, :meth:`from_ids`, :meth:`from_t2d`,
    :meth:`from_checkpoint` or :func:`load_mapping`; it keeps what it was given so that
    :meth:`problems` can say what is wrong with it.

    Attributes:
        ids: absolute target id of each draft slot (int64, length Vd).
        target_vocab_size: V, when known (from t2d or the config), else None.
        source: where it came from, for messages.
    """

    ids: np.ndarray
    target_vocab_size: int | None = None
    source: str = "<mapping>"
    given_t2d: np.ndarray | None = None
    given_dtypes: dict[str, str] = field(default_factory=dict)
    config_draft_vocab_size: int | None = None
    config_vocab_size: int | None = None
    #: read from a Hub repo: its id, the commit, and the Hub's sha256 of each file read
    origin: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        import numpy as np

        v = self.target_vocab_size
        if v is not None and (type(v) is not int or not 0 < v <= MAX_VOCAB_SIZE):
            raise MappingError(
                f"{self.source}: vocab size {v!r} is not an integer between 1 and {MAX_VOCAB_SIZE}",
                path=self.source,
                hint=_MAPPING_HINT,
            )
        if len(self.ids) > MAX_VOCAB_SIZE or (len(self.ids) and int(np.abs(self.ids).max()) >= MAX_VOCAB_SIZE):
            raise MappingError(
                f"{self.source}: token ids beyond {MAX_VOCAB_SIZE:,}: no real vocabulary is that large; "
                "the mapping is damaged",
                path=self.source,
                hint=_MAPPING_HINT,
            )

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def from_d2t(cls, d2t: Any, target_vocab_size: int | None = None, t2d: Any = None, **kw: Any) -> VocabMapping:
        import numpy as np

        d = np.asarray(d2t)
        dtypes = {"d2t": str(d.dtype)}
        if d.ndim != 1:
            raise MappingError(f"{kw.get('source', 'd2t')}: d2t must be 1-D, got shape {d.shape}")
        if not np.issubdtype(d.dtype, np.integer):
            raise MappingError(
                f"{kw.get('source', 'd2t')}: d2t has dtype {d.dtype}; it must be an integer type (int64)",
                tensor="d2t",
            )
        t = None
        if t2d is not None:
            t = cls._check_t2d_dtype(np.asarray(t2d), kw.get("source", "t2d"))
            dtypes["t2d"] = str(np.asarray(t2d).dtype)
            target_vocab_size = target_vocab_size or len(t)
        ids = d.astype(np.int64) + np.arange(len(d), dtype=np.int64)
        return cls(ids, target_vocab_size, given_t2d=t, given_dtypes=dtypes, **kw)

    @classmethod
    def from_ids(cls, ids: Any, target_vocab_size: int | None = None, **kw: Any) -> VocabMapping:
        import numpy as np

        a = np.asarray(ids)
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise MappingError(f"{kw.get('source', 'ids')}: target ids must be a 1-D integer array")
        return cls(a.astype(np.int64), target_vocab_size, given_dtypes={"ids": str(a.dtype)}, **kw)

    @classmethod
    def from_t2d(cls, t2d: Any, **kw: Any) -> VocabMapping:
        import numpy as np

        t = cls._check_t2d_dtype(np.asarray(t2d), kw.get("source", "t2d"))
        return cls(
            np.flatnonzero(t).astype(np.int64),
            len(t),
            given_t2d=t,
            given_dtypes={"t2d": str(np.asarray(t2d).dtype)},
            **kw,
        )

    @classmethod
    def identity(cls, vocab_size: int, **kw: Any) -> VocabMapping:
        """The full-vocabulary map (Vd == V, d2t all zeros)."""
        import numpy as np

        return cls(np.arange(vocab_size, dtype=np.int64), vocab_size, **kw)

    @staticmethod
    def _check_t2d_dtype(t: np.ndarray, source: str) -> np.ndarray:
        import numpy as np

        if t.ndim != 1:
            raise MappingError(f"{source}: t2d must be 1-D, got shape {t.shape}", tensor="t2d")
        if t.dtype == np.bool_:
            return t
        if np.issubdtype(t.dtype, np.integer) and (t.size == 0 or (t.min() >= 0 and t.max() <= 1)):
            return t.astype(bool)
        raise MappingError(f"{source}: t2d has dtype {t.dtype}; it must be bool", tensor="t2d")

    @classmethod
    def from_checkpoint(cls, ck: Checkpoint, *, allow_missing: bool = False) -> VocabMapping | None:
        """The mapping stored in a checkpoint's weights (d2t and/or t2d)."""
        from ckpttools.formats.config import essentials
        from ckpttools.formats.names import canonical_name

        names = {canonical_name(n)[0]: n for n in ck.tensors}
        ess = essentials(ck.config)
        kw: dict[str, Any] = dict(
            source=str(ck.source), config_draft_vocab_size=ess.draft_vocab_size, config_vocab_size=ess.vocab_size
        )
        if ck.hub is not None:
            keys = [names[k] for k in ("d2t", "t2d", *_IDS_KEYS) if k in names]
            read = ["config.json"] * (ck.config is not None) + sorted({ck.tensors[n].shard for n in keys})
            kw["source"] = f"{ck.source} (commit {ck.hub.commit})"
            kw["origin"] = {"repo": ck.hub.repo_id, "commit": ck.hub.commit, "sha256": ck.hub.sha256_of(read)}
        vocab = ess.vocab_size if isinstance(ess.vocab_size, int) else None
        if "d2t" in names:
            t2d = ck.read(names["t2d"]) if "t2d" in names else None
            m = cls.from_d2t(ck.read(names["d2t"]), vocab, t2d, **kw)
            if t2d is None and vocab is None:
                m.target_vocab_size = None
            return m
        if "t2d" in names:
            return cls.from_t2d(ck.read(names["t2d"]), **kw)
        for k in _IDS_KEYS:
            if k in names:
                return cls.from_ids(ck.read(names[k]), vocab, **kw)
        if allow_missing:
            return None
        vd = ess.draft_vocab_size
        why = (
            f"; {missing_mapping_message(vd, vocab)}"
            if isinstance(vd, int) and isinstance(vocab, int) and vd < vocab
            else ""
        )
        raise MappingError(
            f"{ck.source}: holds no vocabulary mapping (no d2t, t2d or ids tensor){why}",
            path=str(ck.source),
            hint="give a drafter with d2t/t2d, or a mapping file (.safetensors/.npy/.json/.pt)",
        )

    # -- views --------------------------------------------------------------------------
    @property
    def draft_vocab_size(self) -> int:
        return int(len(self.ids))

    @property
    def d2t(self) -> np.ndarray:
        import numpy as np

        return self.ids - np.arange(len(self.ids), dtype=np.int64)

    def t2d(self, target_vocab_size: int | None = None) -> np.ndarray:
        """The membership mask over the target vocabulary."""
        import numpy as np

        v = target_vocab_size or self.target_vocab_size or (int(self.ids.max()) + 1 if len(self.ids) else 0)
        mask = np.zeros(v, dtype=bool)
        mask[self.ids[(self.ids >= 0) & (self.ids < v)]] = True
        return mask

    @property
    def order(self) -> str:
        """``ascending`` (SpecForge, EAGLE, speculators) or ``unordered`` (e.g. ModelOpt's frequency order)."""
        import numpy as np

        if len(self.ids) < 2 or bool(np.all(np.diff(self.ids) > 0)):
            return "ascending"
        return "unordered"

    @property
    def is_identity(self) -> bool:
        import numpy as np

        return (
            self.target_vocab_size is not None
            and self.draft_vocab_size == self.target_vocab_size
            and bool(np.all(self.d2t == 0))
        )

    # -- checks -------------------------------------------------------------------------
    def problems(self) -> list[MappingProblem]:
        """Everything wrong or notable: dtype, range, duplicates, t2d agreement, order, sizes."""
        out = self._dtype_problems() + self._id_problems() + self._t2d_problems()
        vd = self.draft_vocab_size
        if self.config_draft_vocab_size is not None and self.config_draft_vocab_size != vd:
            out.append(
                MappingProblem(
                    "d2t-length",
                    "error",
                    f"d2t has {vd} slots but config draft_vocab_size is {self.config_draft_vocab_size}",
                )
            )
        if self.order != "ascending":
            out.append(
                MappingProblem(
                    "order",
                    "info",
                    "slots are not in ascending target-id order (ModelOpt's frequency order); "
                    "valid for SGLang and vLLM, which read d2t as is",
                )
            )
        if self.is_identity:
            out.append(
                MappingProblem("identity", "info", "d2t is all zeros with Vd == V: the identity (full-vocab) map")
            )
        return out

    def _dtype_problems(self) -> list[MappingProblem]:
        out: list[MappingProblem] = []
        for key, dt in self.given_dtypes.items():
            if key in ("d2t", "ids") and dt != "int64":
                out.append(
                    MappingProblem(
                        "d2t-dtype", "warning", f"{key} is {dt}; SGLang and vLLM expect int64 (widened on load)", key
                    )
                )
            if key == "t2d" and dt != "bool":
                out.append(MappingProblem("t2d-dtype", "warning", f"t2d is {dt}; expected bool", "t2d"))
        return out

    def _id_problems(self) -> list[MappingProblem]:
        """Target ids in range and distinct."""
        import numpy as np

        out: list[MappingProblem] = []
        ids, v, vd = self.ids, self.target_vocab_size, self.draft_vocab_size
        if vd and ids.min() < 0:
            bad = int(np.flatnonzero(ids < 0)[0])
            out.append(
                MappingProblem("d2t-range", "error", f"draft id {bad} maps to target id {int(ids[bad])}, below 0")
            )
        if v is not None and vd and ids.max() >= v:
            bad = int(np.flatnonzero(ids >= v)[0])
            out.append(
                MappingProblem(
                    "d2t-range",
                    "error",
                    f"draft id {bad} maps to target id {int(ids[bad])}, outside the target vocab of {v} "
                    "(a CUDA index assert in SGLang/vLLM)",
                )
            )
        uniq, counts = np.unique(ids, return_counts=True)
        if len(uniq) != vd:
            dup = int(uniq[counts > 1][0])
            out.append(
                MappingProblem(
                    "d2t-duplicates", "error", f"{vd - len(uniq)} draft slot(s) repeat a target id (e.g. {dup})"
                )
            )
        return out

    def _t2d_problems(self) -> list[MappingProblem]:
        """A given t2d agrees with d2t and with the vocabulary size."""
        import numpy as np

        out: list[MappingProblem] = []
        ids, v, vd = self.ids, self.target_vocab_size, self.draft_vocab_size
        t = self.given_t2d
        if t is None:
            return out
        if v is not None and len(t) != v:
            out.append(
                MappingProblem("t2d-length", "error", f"t2d has length {len(t)} but the target vocab is {v}", "t2d")
            )
        nz = np.flatnonzero(t)
        if len(nz) != vd or not np.array_equal(nz, np.sort(ids)):
            out.append(
                MappingProblem(
                    "t2d-mismatch",
                    "error",
                    f"t2d marks {len(nz)} tokens but d2t maps {vd}, and the sets differ "
                    f"in {len(np.setxor1d(nz, ids))} token(s)",
                    "t2d",
                )
            )
        return out

    def check(self) -> VocabMapping:
        """Raise :class:`MappingError` (exit 2) on the first error-level problem; return self."""
        for p in self.problems():
            if p.severity == "error":
                raise MappingError(f"{self.source}: {p.message}", tensor=p.location, path=self.source)
        return self

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (used by inspect)."""
        d2t = self.d2t
        return {
            "source": self.source,
            "draft_vocab_size": self.draft_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "dtypes": dict(self.given_dtypes),
            "has_t2d": self.given_t2d is not None,
            "d2t_min": int(d2t.min()) if len(d2t) else None,
            "d2t_max": int(d2t.max()) if len(d2t) else None,
            "target_id_min": int(self.ids.min()) if len(d2t) else None,
            "target_id_max": int(self.ids.max()) if len(d2t) else None,
            "order": self.order,
            "identity": self.is_identity,
            "t2d_agrees": None
            if self.given_t2d is None
            else not any(p.code in ("t2d-mismatch", "t2d-length") for p in self.problems()),
            "problems": [p.__dict__ for p in self.problems()],
        }


def _array(v: Any, source: str, key: str) -> np.ndarray:
    """A JSON or loaded value as a 1-D numeric array, or MappingError."""
    import numpy as np

    if isinstance(v, np.ndarray):
        a = v
    elif isinstance(v, list):
        try:
            a = np.asarray(v)
        except (ValueError, OverflowError, TypeError):
            a = None
        if a is not None and a.dtype.kind == "b" and not all(type(x) is bool for x in v):
            a = None
    else:
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in "biu":
        raise MappingError(
            f"{source}: {key} must be a flat list of integers (or booleans for t2d)",
            path=source,
            tensor=key,
            hint=_MAPPING_HINT,
        )
    return a


def _from_obj(obj: Any, source: str, hint_name: str) -> VocabMapping:
    """A mapping from a dict of arrays or a bare array (name hints say which kind)."""
    import numpy as np

    if isinstance(obj, dict):
        keys = {str(k): k for k in obj}
        d2t = next((k for k in _D2T_KEYS if k in keys), None)
        t2d = next((k for k in _T2D_KEYS if k in keys), None)
        ids = next((k for k in _IDS_KEYS if k in keys), None)
        if d2t is not None:
            t = None if t2d is None else _array(obj[keys[t2d]], source, "t2d")
            return VocabMapping.from_d2t(_array(obj[keys[d2t]], source, d2t), t2d=t, source=source)
        if ids is not None:
            v = obj.get("target_vocab_size", obj.get("vocab_size"))
            return VocabMapping.from_ids(_array(obj[keys[ids]], source, ids), v, source=source)
        if t2d is not None:
            return VocabMapping.from_t2d(_array(obj[keys[t2d]], source, "t2d"), source=source)
        raise MappingError(
            f"{source}: no d2t, t2d or ids inside (keys: {sorted(keys)[:8]})", path=source, hint=_MAPPING_HINT
        )
    arr = _array(obj, source, "the array")
    if arr.dtype == np.bool_ or "t2d" in hint_name:
        return VocabMapping.from_t2d(arr, source=source)
    if any(k in hint_name for k in ("ids", "target", "token")) and "d2t" not in hint_name:
        return VocabMapping.from_ids(arr, source=source)
    return VocabMapping.from_d2t(arr, source=source)


def load_mapping(src: str | Path | Checkpoint | VocabMapping) -> VocabMapping:
    """Load a mapping from a checkpoint, or a mapping file (.safetensors, .npy, .json, .pt).

    A bare array in a .npy/.pt/.json file is read as d2t offsets unless the file name
    says ``t2d`` (a mask) or ``ids`` (absolute target ids); a dict is read by its keys
    (``d2t``, ``t2d``, ``ids``/``target_ids``). .pt files are read with
    ``torch.load(weights_only=True)``: no arbitrary unpickling.

    Raises:
        MappingError, CheckpointNotFoundError, CheckpointFormatError.
    """
    import numpy as np
    from ckpttools.io.checkpoint import Checkpoint, open_checkpoint
    from ckpttools.io.fsutil import ensure_regular

    if isinstance(src, VocabMapping):
        return src
    if isinstance(src, Checkpoint):
        return VocabMapping.from_checkpoint(src)  # type: ignore[return-value]
    p = Path(src)
    name = p.name.lower()
    is_file = p.exists() and not p.is_dir()
    if is_file and p.suffix in (".npy", ".json", ".pt") and p.name != "config.json":
        ensure_regular(p)
    if is_file and p.suffix == ".npy":
        from ckpttools.io.fsutil import starts_with

        try:
            npy = starts_with(p, b"\x93NUMPY")  # numpy would call any other bytes "pickled data"
            arr = np.load(p, allow_pickle=False) if npy else None
        except (ValueError, EOFError, OSError) as e:
            raise MappingError(
                f"{p}: not a plain .npy array ({e.__class__.__name__}: {e})", path=p, hint=_MAPPING_HINT
            ) from None
        if not npy:
            raise MappingError(
                f"{p}: not a .npy file (it does not start with NumPy's magic)", path=p, hint=_MAPPING_HINT
            )
        return _from_obj(arr, str(p), name)
    if is_file and p.suffix == ".json" and p.name != "config.json":
        from ckpttools.io.inputs import read_json

        obj = read_json(p, "mapping", hint=_MAPPING_HINT, error=MappingError)
        if not isinstance(obj, (dict, list)):
            raise MappingError(f"{p}: expected a JSON object with d2t/t2d/ids, or a list", path=p, hint=_MAPPING_HINT)
        return _from_obj(obj, str(p), name)
    if is_file and p.suffix == ".pt":
        return _from_obj(_load_pt(p), str(p), name)
    if not p.exists() and p.suffix in MAPPING_FILE_SUFFIXES:
        from ckpttools.io.fsutil import absent_words

        raise CheckpointNotFoundError(f"{p}: {absent_words(p)}", path=p)
    with open_checkpoint(src) as ck:
        return VocabMapping.from_checkpoint(ck)  # type: ignore[return-value]


def _load_pt(p: Path) -> Any:
    try:
        import torch
    except ImportError:
        raise MappingError(
            f"{p}: reading .pt mapping files needs torch",
            path=p,
            hint="pip install torch, or save the mapping as .safetensors/.npy/.json",
        ) from None
    import warnings

    try:
        with warnings.catch_warnings():  # torch warns about legacy files before refusing them
            warnings.simplefilter("ignore")
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError for anything not plain tensors
        raise PickleRefusedError(
            f"{p}: refused: not loadable with weights_only=True ({e.__class__.__name__})", path=p
        ) from None

    def conv(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.cpu().numpy()
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        return x

    return conv(obj)
