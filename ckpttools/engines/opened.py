"""A drafter opened once: its directory resolved, its config.json parsed, its tensor index read.

One run (``ckpt verify --launch``, ``measure(request)``) opens each drafter once, with
:func:`open_once`, and hands the :class:`OpenedDrafter` to every check and helper that reads it:
validate and its quantization checks (``ckpttools.ops``), the swap helpers (``server_spec``,
``swappable``, ``swap_in``) and the compare flow. Its typed config (:attr:`OpenedDrafter.essentials`)
and its load plan for a release (:meth:`OpenedDrafter.load_plan`) are made once, on first use.

Every helper that takes one also takes a path (or a :class:`~ckpttools.io.checkpoint.Checkpoint`),
which it opens as before: :func:`open_once` returns an OpenedDrafter as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.errors import CkptError, NoWeightsError
from ckpttools.engines.config_facts import ConfigFacts, config_facts
from ckpttools.engines.flavor import Flavor, detect_flavor
from ckpttools.formats.config import ConfigEssentials, essentials
from ckpttools.formats.conventions import TargetOnce
from ckpttools.io.checkpoint import Checkpoint, load_config, open_checkpoint

__all__ = ["OpenedDrafter", "OpenedTarget", "open_once", "open_target"]


@dataclass(eq=False)
class OpenedDrafter:
    """A drafter as one run reads it: opened, and its config parsed, once."""

    #: the drafter as given (the name reports and messages use)
    source: str
    #: its config.json, parsed (None: it has none)
    config: dict[str, Any] | None
    #: its tensor index (None: a config.json alone)
    checkpoint: Checkpoint | None
    _essentials: ConfigEssentials | None = field(default=None, repr=False)
    _facts: ConfigFacts | None = field(default=None, repr=False)
    _flavor: Flavor | None = field(default=None, repr=False)
    _plans: dict[int, tuple[Any, Any]] = field(default_factory=dict, repr=False)

    @property
    def path(self) -> Path:
        """The drafter's path as given."""
        return Path(self.source)

    @property
    def essentials(self) -> ConfigEssentials:
        """The typed config (:func:`ckpttools.formats.config.essentials`), made once."""
        if self._essentials is None:
            self._essentials = essentials(self.config)
        return self._essentials

    @property
    def facts(self) -> ConfigFacts:
        """Every fact validate's checks read of the config (:func:`ckpttools.engines.config_facts.config_facts`),
        made once."""
        if self._facts is None:
            self._facts = config_facts(self.config, self.essentials)
        return self._facts

    @property
    def flavor(self) -> Flavor:
        """What kind of drafter it is (:func:`ckpttools.engines.flavor.detect_flavor` of its config and
        tensor names), made once."""
        if self._flavor is None:
            names = self.checkpoint.tensors.keys() if self.checkpoint is not None else []
            self._flavor = detect_flavor(self.config, names)
        return self._flavor

    def headers(self) -> dict[str, tuple[list[int], str]]:
        """{tensor name: (shape, safetensors dtype)} (empty: a config.json alone)."""
        ck = self.checkpoint
        return {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()} if ck is not None else {}

    def require_checkpoint(self) -> Checkpoint:
        """The tensor index, for what needs weights; a config.json alone raises what
        :func:`~ckpttools.io.checkpoint.open_checkpoint` raises for it (NoWeightsError)."""
        return self.checkpoint if self.checkpoint is not None else open_checkpoint(self.source)

    def load_plan(self, release: Any) -> Any:
        """What ``release`` builds from the drafter (:func:`ckpttools.engines.load_plan.load_plan`),
        made once per release."""
        got = self._plans.get(id(release))
        if got is None:
            from ckpttools.engines.load_plan import load_plan

            got = self._plans[id(release)] = (release, load_plan(self.headers(), self.config or {}, release))
        return got[1]

    def close(self) -> None:
        """Drop the memory maps and file descriptors of its shards (the index stays: a later read maps again)."""
        if self.checkpoint is not None:
            self.checkpoint.close()


def open_once(drafter: str | Path | Checkpoint | OpenedDrafter) -> OpenedDrafter:
    """``drafter`` opened: a directory with weights (config and headers read), a directory holding a
    config.json alone, or a config.json; an open checkpoint wrapped; an OpenedDrafter as it is.

    Raises:
        what :func:`~ckpttools.io.checkpoint.open_checkpoint` raises (a directory with neither
        weights nor config.json: NoWeightsError), ConfigError (a config.json that is not an object).
    """
    if isinstance(drafter, OpenedDrafter):
        return drafter
    if isinstance(drafter, Checkpoint):
        return OpenedDrafter(str(drafter.source), drafter.config, drafter)
    p = Path(drafter)
    if p.is_file() and p.suffix == ".json":
        return OpenedDrafter(str(p), load_config(p), None)
    try:
        ck = open_checkpoint(drafter)
    except NoWeightsError:
        if p.is_dir() and (p / "config.json").is_file():
            return OpenedDrafter(str(p), load_config(p / "config.json"), None)
        raise
    return OpenedDrafter(str(drafter), ck.config, ck)


class OpenedTarget(TargetOnce):
    """A target as one run reads it: its config read once, where first needed, and its facts
    (:func:`ckpttools.engines.config_facts.config_facts`) derived once from it."""

    _facts: ConfigFacts | None = None

    @property
    def facts(self) -> ConfigFacts:
        """The target config's facts, made on first use."""
        if self._facts is None:
            self._facts = config_facts(self.read()[0])
        return self._facts

    def config_or_none(self) -> dict[str, Any] | None:
        """Its config as read (kept from the checks that read it), or None where it cannot be read: for
        what only marks limits with it (the context axis), not for the checks, which say why."""
        try:
            return self.read()[0]
        except (CkptError, OSError):
            return None


def open_target(target: str | Path | Checkpoint | TargetOnce) -> OpenedTarget:
    """``target`` as an :class:`OpenedTarget` (one given already: as it is; a :class:`TargetOnce`: with
    what it has read kept). Nothing is read here."""
    if isinstance(target, OpenedTarget):
        return target
    if isinstance(target, TargetOnce):
        opened = OpenedTarget(target.target)
        opened._read = target._read
        return opened
    return OpenedTarget(target)
