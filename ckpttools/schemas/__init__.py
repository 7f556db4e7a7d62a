"""The JSON Schemas ckpttools validates against and publishes (a copy of each stands in the
repository's top-level ``schemas/`` folder; a test keeps the two equal)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["load_schema"]


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    """The schema ``name`` (e.g. ``eagle3-drafter-config.schema.json``), parsed."""
    return json.loads(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))
