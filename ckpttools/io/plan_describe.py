"""A :class:`~ckpttools.io.plan.WritePlan` as JSON-ready data (``--dry-run --json``;
``schemas/write-plan.schema.json``): the functions live beside the plan they describe, in
:mod:`ckpttools.io.write_plan`; this module keeps their old import path."""

from __future__ import annotations

from ckpttools.io.write_plan import describe, describe_source

__all__ = ["describe", "describe_source"]
