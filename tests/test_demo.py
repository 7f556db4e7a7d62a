"""ckpt demo: the README's main job replays the story on the shipped pair."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from ckpttools.cli.commands import cli  # noqa: E402
from ckpttools.demo.story import story_dir  # noqa: E402


def test_demo_tells_the_story():
    if not (story_dir() / "drafter" / "model.safetensors").is_file():
        pytest.skip("the story pair is not built")
    r = CliRunner().invoke(cli, ["demo"])
    assert r.exit_code == 0, r.output
    for step in ("[1]", "[2]", "[3]", "[4]", "[5]"):
        assert step in r.stdout
    m = re.search(
        r"summary: matched ([\d.]+) \| naive swap ([\d.]+) \| remapped ([\d.]+) \| on target B ([\d.]+)", r.stdout
    )
    assert m, r.stdout
    matched, naive, remapped, b = map(float, m.groups())
    assert matched > 2.5 and naive < matched - 1 and remapped > naive + 1 and b < matched - 1
    assert "slots agree" in r.stdout and "rows carried" in r.stdout
