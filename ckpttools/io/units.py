"""Byte sizes for a person, in one unit system everywhere: binary (KiB, MiB, GiB), as
``ls -h``, ``du -h`` and ``nvidia-smi`` show them. (Sizes a user types, ``--max-shard-size 5GB``,
accept both systems: io/writer.parse_size.)"""

from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(n: int | None) -> str:
    """``812.00 KiB``, ``3.41 GiB``; ``-`` for None."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(size) < 1024 or unit == "PiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    return str(n)
