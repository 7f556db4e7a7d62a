"""Hub repo references (``org/name[@revision]``): recognised and split without importing
huggingface_hub, so that local paths pay nothing for Hub support."""

from __future__ import annotations

import re

from ckpttools.errors import CheckpointNotFoundError

__all__ = ["REPO_REF", "split_ref"]

#: ``org/name`` with an optional ``@revision`` (a branch, tag or commit)
REPO_REF = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def split_ref(text: str, revision: str | None = None) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``); an explicit ``revision`` wins."""
    repo_id, _, after = text.partition("@")
    rev = revision or after or None
    if rev is not None and any(part in ("", ".", "..") for part in rev.split("/")):
        raise CheckpointNotFoundError(
            f"{text}: {rev!r} is not a revision name", path=text, hint="give a branch, tag or commit after @"
        )
    return repo_id, rev
