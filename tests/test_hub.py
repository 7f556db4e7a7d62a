"""Hub repos read the Hub's way, against tests/local_hub.py driven by huggingface_hub's
own client: headers by range request, only the tensor bytes a command needs, whole repos
through huggingface_hub's cache, and every failure as one line with exit code 2.

The byte counts asserted here are the server's: every body it sent."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckpttools.demo.tiny import build_drafter, build_huge_sparse, build_target
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from .local_hub import LocalHub, Repo

MB = 1 << 20
KIMI_V, KIMI_VD, KIMI_H = 163_840, 32_000, 7168


def _kimi_sparse_drafter(out: Path, ids: np.ndarray) -> Path:
    """A Kimi-K2-shaped drafter (hidden 7168, 32,000 slots of a 163,840 vocabulary) whose
    d2t and t2d are real and whose 1.2 GB of weights are holes in a sparse file."""
    out.mkdir(parents=True)
    H = KIMI_H
    shapes = {
        "fc.weight": ("BF16", (H, 3 * H)),
        "layers.0.self_attn.q_proj.weight": ("BF16", (7168, 2 * H)),
        "layers.0.mlp.down_proj.weight": ("BF16", (H, 4096)),
        "norm.weight": ("BF16", (H,)),
        "lm_head.weight": ("BF16", (KIMI_VD, H)),
        "d2t": ("I64", (KIMI_VD,)),
        "t2d": ("BOOL", (KIMI_V,)),
    }
    size = {"BF16": 2, "I64": 8, "BOOL": 1}
    header, pos = {}, 0
    for name, (dt, shape) in shapes.items():
        n = int(np.prod(shape)) * size[dt]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    t2d = np.zeros(KIMI_V, bool)
    t2d[ids] = True
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        base = 8 + len(raw)
        f.seek(base + header["d2t"]["data_offsets"][0])
        f.write((ids - np.arange(KIMI_VD)).astype("<i8").tobytes())
        f.write(t2d.tobytes())
        f.truncate(base + pos)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "vocab_size": KIMI_V,
        "draft_vocab_size": KIMI_VD,
        "num_hidden_layers": 1,
        "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    src = tmp_path_factory.mktemp("repos")
    ids_a = np.sort(np.random.default_rng(0).choice(1024, 256, replace=False))
    out = {
        "drafter": build_drafter(src / "drafter", "sglang", mapping=ids_a, num_layers=1, seed=1),
        "target": build_target(src / "target", hidden_size=64, vocab_size=1024, num_layers=8, max_shard_size=200_000),
        "huge": build_huge_sparse(src / "huge"),
    }
    m = src / "mapping"
    m.mkdir()
    ids_b = np.sort(np.concatenate([ids_a[:200], np.setdiff1d(np.arange(1024), ids_a)[:56]]))
    save_mapping(VocabMapping.from_ids(ids_b, 1024), m / "model.safetensors")
    out["mapping"] = m
    rng = np.random.default_rng(7)
    ka = np.sort(rng.choice(KIMI_V, KIMI_VD, replace=False))
    kb = np.sort(np.concatenate([ka[298:], np.setdiff1d(np.arange(KIMI_V), ka)[:298]]))
    out["k2-a"] = _kimi_sparse_drafter(src / "k2-a", ka)
    out["k2-b"] = _kimi_sparse_drafter(src / "k2-b", kb)
    pk = src / "pickle"
    pk.mkdir()
    (pk / "config.json").write_text("{}")
    (pk / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not unpickled")
    out["pickle"] = pk
    out["v1"] = build_drafter(src / "v1", "eagle", seed=3)
    return out


def _damaged(src: Path) -> Repo:
    """The drafter with its header length pointing past the end of the file (a cut upload)."""
    r = Repo.from_dir(src)
    data = bytearray(r.files["model.safetensors"])  # type: ignore[arg-type]
    data[:8] = struct.pack("<Q", len(data) * 2)
    return Repo({**r.files, "model.safetensors": bytes(data)})


@pytest.fixture()
def hub(repos):
    r = {
        "org/drafter": Repo.from_dir(repos["drafter"]),
        "org/target": Repo.from_dir(repos["target"]),
        "org/mapping": Repo.from_dir(repos["mapping"]),
        "org/huge": Repo.from_dir(repos["huge"], by_path=True),
        "org/k2-a": Repo.from_dir(repos["k2-a"], by_path=True),
        "org/k2-b": Repo.from_dir(repos["k2-b"], by_path=True),
        "org/pickle": Repo.from_dir(repos["pickle"]),
        "org/gated": Repo.from_dir(repos["drafter"], status=403),
        "org/private": Repo.from_dir(repos["drafter"], token="hf_sekrit"),
        "org/deleted": Repo.from_dir(repos["target"], missing=frozenset({"config.json"})),
        "org/two": [Repo.from_dir(repos["drafter"]), Repo.from_dir(repos["v1"], refs=("v1",))],
        "org/damaged": _damaged(repos["drafter"]),
    }
    with LocalHub(r) as h:
        yield h


@pytest.fixture()
def env(hub, tmp_path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    e.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        CKPT_CACHE=str(tmp_path / "ckpt-cache"),
    )
    return e


def ckpt(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ckpttools", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _cdn_requests(hub: LocalHub, repo: str) -> list[str]:
    return [r for r in hub.requests if f"/cdn/{repo}/" in r]


# ---------------------------------------------------------------------------------- the server
def test_local_hub_speaks_to_huggingface_hubs_own_client(hub, env, repos, monkeypatch):
    """hf_hub_download, get_safetensors_metadata, HfFileSystem range reads and snapshot_download."""
    code = """
import sys, json
from huggingface_hub import hf_hub_download, get_safetensors_metadata, HfFileSystem, snapshot_download
p = hf_hub_download("org/target", "config.json")
meta = get_safetensors_metadata("org/target")
fs = HfFileSystem()
shard = sorted(meta.files_metadata)[0]
with fs.open("org/target/" + shard, "rb") as f:
    f.seek(8)
    head = f.read(16)
snap = snapshot_download("org/drafter")
print(json.dumps({"config": open(p).read(), "shards": sorted(meta.files_metadata),
                  "tensors": sum(len(m.tensors) for m in meta.files_metadata.values()),
                  "head": head.decode(), "snap": snap, "shard": shard}))
"""
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["config"] == (repos["target"] / "config.json").read_text()
    with open_checkpoint(repos["target"]) as ck:
        assert got["shards"] == sorted(ck.headers) and got["tensors"] == len(ck.tensors)
    assert got["head"] == (repos["target"] / got["shard"]).read_bytes()[8:24].decode()
    snap = Path(got["snap"])
    assert (snap / "model.safetensors").read_bytes() == (repos["drafter"] / "model.safetensors").read_bytes()
    assert any(r.startswith("GET /cdn/org/target/") for r in hub.requests)  # LFS went through the redirect


# ---------------------------------------------------------------------------------- headers only
def test_inspect_of_a_1tb_repo_reads_headers_only_then_the_cache(hub, env, repos):
    with open_checkpoint(repos["huge"]) as ck:
        headers = sum(h.header_len + 8 for h in ck.headers.values())
        local = ck.tensors.keys()
    r = ckpt(env, "inspect", "org/huge", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["num_tensors"] == len(local) and rep["total_bytes"] > 10**12
    first = hub.bytes_served
    index = (repos["huge"] / "model.safetensors.index.json").stat().st_size
    assert first <= 16 * MB and first < headers * 1.3 + index + MB, (first, headers, index)
    assert rep["hub"]["repo"] == "org/huge" and len(rep["hub"]["commit"]) == 40
    # a second run: the Hub confirms the commit (one model-info call), headers come from the cache
    hub.reset_counts()
    r2 = ckpt(env, "inspect", "org/huge", "--json")
    assert r2.returncode == 0, r2.stderr
    assert [q.split("?")[0] for q in hub.requests] == ["GET /api/models/org/huge"], hub.requests
    assert hub.bytes_served < 64 << 10
    assert json.loads(r2.stdout)["num_tensors"] == rep["num_tensors"]
    # offline: nothing at all
    hub.reset_counts()
    r3 = ckpt({**env, "HF_HUB_OFFLINE": "1"}, "inspect", "org/huge", "--json", "--no-tensors")
    assert r3.returncode == 0, r3.stderr
    assert hub.requests == [] and json.loads(r3.stdout)["num_tensors"] == rep["num_tensors"]


def test_validate_against_a_hub_target_reads_only_its_config(hub, env, repos):
    r = ckpt(env, "validate", "org/drafter", "--target", "org/huge", "--json")
    assert r.returncode in (0, 1), r.stderr
    assert "target" in json.loads(r.stdout)["checked"]
    assert _cdn_requests(hub, "org/huge") == []  # no header, no tensor byte of the 1 TB target
    huge = [q for q in hub.requests if "org/huge" in q and "/api/" not in q]
    assert huge and all(q.endswith("/config.json") for q in huge), huge
    # the drafter: its header, then only d2t and t2d (for the mapping checks)
    with open_checkpoint(repos["drafter"]) as ck:
        header = ck.headers["model.safetensors"].header_len + 8
        mapping = ck.tensors["d2t"].nbytes + ck.tensors["t2d"].nbytes
        size = ck.headers["model.safetensors"].file_size
    served = hub.bytes_served  # every body the server sent
    config = (repos["drafter"] / "config.json").stat().st_size + (repos["huge"] / "config.json").stat().st_size
    assert served < size  # the drafter's weights never came whole
    assert served <= max(header, 64 << 10) + mapping + config + (64 << 10), (served, header, mapping)


def test_diff_vocab_of_two_kimi_shaped_repos_reads_headers_and_the_mappings(hub, env, repos):
    r = ckpt(env, "diff-vocab", "org/k2-a", "org/k2-b", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["slots_total"] == KIMI_VD and d["shared_tokens"] == KIMI_VD - 298
    assert "commit" in d["a"]["source"]
    mapping = 2 * (KIMI_VD * 8 + KIMI_V)  # d2t and t2d of both
    size = (repos["k2-a"] / "model.safetensors").stat().st_size
    cdn = hub.bytes_served
    assert cdn <= mapping + 2 * (64 << 10) + 2 * 8 << 10, (cdn, mapping)
    assert cdn < size / 1000  # of 2 x 1.2 GB


# ---------------------------------------------------------------------------------- remap
def test_remap_fill_target_reads_only_the_needed_rows_and_equals_the_local_run(hub, env, repos, tmp_path):
    args = ["--to", "org/mapping", "--fill", "target", "--target", "org/target", "--json"]
    r = ckpt(env, "remap", "org/drafter", "-o", str(tmp_path / "out-hub"), *args)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    filled = rep["rows_filled"]
    assert filled > 0
    with open_checkpoint(repos["target"]) as ck:
        head = ck.tensors["lm_head.weight"]
        row = head.nbytes // head.shape[0]
        first_data = min(h.header_len + 8 for h in ck.headers.values())
    # the target: its headers (reads from byte 0), then exactly the filled lm_head rows
    assert hub.read_bytes("org/target", from_byte=first_data) == filled * row
    assert hub.read_bytes("org/target", head.shard, from_byte=first_data) == filled * row
    # the drafter came whole, once, through huggingface_hub's cache
    drafter_size = (repos["drafter"] / "model.safetensors").stat().st_size
    assert hub.read_bytes("org/drafter", "model.safetensors") == drafter_size
    # against the same remap run on local copies: the weights are byte-equal
    local = ["--to", str(repos["mapping"]), "--fill", "target", "--target", str(repos["target"])]
    r2 = ckpt(env, "remap", str(repos["drafter"]), "-o", str(tmp_path / "out-local"), *local)
    assert r2.returncode == 0, r2.stderr
    a = (tmp_path / "out-hub" / "model.safetensors").read_bytes()
    b = (tmp_path / "out-local" / "model.safetensors").read_bytes()
    assert a == b
    manifest = json.loads((tmp_path / "out-hub" / "ckpttools-manifest.json").read_text())
    hubrec = manifest["hub"]
    sha = hashlib.sha256((repos["drafter"] / "model.safetensors").read_bytes()).hexdigest()
    assert hubrec["drafter"]["repo"] == "org/drafter" and hubrec["drafter"]["sha256"]["model.safetensors"] == sha
    assert hubrec["target"]["repo"] == "org/target" and len(hubrec["target"]["commit"]) == 40
    assert hubrec["destination"]["repo"] == "org/mapping"
    # a second run transfers no drafter byte again
    hub.reset_counts()
    r3 = ckpt(env, "remap", "org/drafter", "-o", str(tmp_path / "out-hub2"), *args)
    assert r3.returncode == 0, r3.stderr
    assert _cdn_requests(hub, "org/drafter") == []


# ---------------------------------------------------------------------------------- revisions and auth
def test_a_revision_pins_a_tag_and_the_report_names_its_commit(hub, env):
    two = hub.repos["org/two"]
    assert isinstance(two, list)
    main, v1 = two[0].commit, two[1].commit
    r = ckpt(env, "inspect", "org/two@v1", "--json", "--no-tensors")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["kind"] == "eagle" and rep["hub"]["commit"] == v1 and rep["hub"]["revision"] == "v1"
    r = ckpt(env, "inspect", "org/two", "--json", "--no-tensors")
    assert json.loads(r.stdout)["hub"]["commit"] == main and json.loads(r.stdout)["kind"] == "sglang"
    r = ckpt(env, "inspect", f"org/two@{v1}")
    assert r.returncode == 0 and f"at commit {v1}" in r.stdout


def test_hf_token_and_the_stored_login_open_a_private_repo(hub, env, tmp_path):
    r = ckpt(env, "inspect", "org/private", "--no-tensors")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "ckpt: error: org/private: the Hub wants a login for this repo (401): it is private or gated, or does "
        "not exist",
        "ckpt: hint: log in with `hf auth login` or set HF_TOKEN; if the repo is gated, request access on its page",
    ]
    r = ckpt({**env, "HF_TOKEN": "hf_sekrit"}, "inspect", "org/private", "--no-tensors")
    assert r.returncode == 0, r.stderr
    home = Path(env["HF_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "token").write_text("hf_sekrit")  # where `hf auth login` stores it
    r = ckpt({**env, "CKPT_CACHE": str(tmp_path / "fresh-cache")}, "inspect", "org/private", "--no-tensors")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "args, first_line, hint",
    [
        (
            ["inspect", "org/gated"],
            "ckpt: error: org/gated: access denied (403): the repo is gated or private and this token may not read it",
            "ckpt: hint: request access at {url}/org/gated, then log in with a token that has it "
            "(`hf auth login` or HF_TOKEN)",
        ),
        (
            ["inspect", "org/nope"],
            "ckpt: error: org/nope: no such repo on the Hub",
            "ckpt: hint: check the repo id (org/name)",
        ),
        (
            ["inspect", "org/drafter@no-such-branch"],
            "ckpt: error: org/drafter@no-such-branch: the Hub has no revision 'no-such-branch' in org/drafter",
            "ckpt: hint: check the branch, tag or commit after @",
        ),
        (
            ["validate", "org/drafter", "--target", "org/deleted"],
            "ckpt: error: org/deleted: no file 'config.json' in the repo",
            "ckpt: hint: check the path, or give a Hub repo id like org/name[@revision]",
        ),
        (
            ["inspect", "org/pickle"],
            "ckpt: error: org/pickle: only pickle-based weights (pytorch_model.bin): ckpttools never unpickles",
            None,
        ),
    ],
)
def test_hub_errors_are_one_line_and_exit_2(hub, env, args, first_line, hint):
    r = ckpt(env, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[0] == first_line
    if hint is not None:
        assert lines[1] == hint.format(url=hub.url)
    assert "Traceback" not in r.stderr


def test_a_hub_that_cannot_be_reached_or_answers_late(hub, env):
    r = ckpt({**env, "HF_ENDPOINT": "http://127.0.0.1:9"}, "inspect", "org/drafter")
    assert r.returncode == 2
    assert r.stderr.startswith("ckpt: error: org/drafter: cannot reach the Hub (")
    assert "set HF_HUB_OFFLINE=1" in r.stderr.splitlines()[1]
    hub.delay = 3.0
    r = ckpt({**env, "HF_HUB_DOWNLOAD_TIMEOUT": "1", "HF_HUB_ETAG_TIMEOUT": "1"}, "inspect", "org/drafter")
    hub.delay = 0.0
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == "ckpt: error: org/drafter: the Hub did not answer in time"
    assert "HF_HUB_OFFLINE=1" in r.stderr.splitlines()[1]


def test_offline_with_an_empty_cache_says_so(hub, env):
    r = ckpt({**env, "HF_HUB_OFFLINE": "1"}, "inspect", "org/drafter")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == (
        "ckpt: error: org/drafter: not in the local cache, and HF_HUB_OFFLINE=1 forbids asking the Hub"
    )
    assert hub.requests == []


# ---------------------------------------------------------------------------------- deep and downloads
def test_deep_validate_downloads_after_saying_how_much_or_refuses(hub, env, repos):
    r = ckpt(env, "validate", "org/huge", "--deep")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0].startswith("ckpt: error: org/huge: a deep check reads every tensor, and its ")
    assert "--max-download" in r.stderr.splitlines()[1]
    assert hub.read_bytes("org/huge", from_byte=1 << 20) == 0  # nothing but headers was read
    r = ckpt(env, "validate", "org/drafter", "--deep")
    assert r.returncode == 0, r.stderr
    assert "the deep check downloads" in r.stderr and "deep" in r.stdout
    size = (repos["drafter"] / "model.safetensors").stat().st_size
    assert hub.read_bytes("org/drafter", "model.safetensors", from_byte=0) >= size


def test_export_of_a_hub_drafter_downloads_it_once_and_records_the_commit(hub, env, repos, tmp_path):
    r = ckpt(env, "export", "org/drafter", "-o", str(tmp_path / "exp"), "--target", "org/target")
    assert r.returncode == 0, r.stderr
    assert "fetching" in r.stderr and "into the Hugging Face cache" in r.stderr
    m = json.loads((tmp_path / "exp" / "ckpttools-manifest.json").read_text())
    two = hub.repos["org/drafter"]
    assert not isinstance(two, list)
    assert m["hub"]["drafter"]["commit"] == two.commit
    assert _cdn_requests(hub, "org/target") == []  # the target: config.json only
    hub.reset_counts()
    r = ckpt(env, "export", "org/drafter", "-o", str(tmp_path / "exp2"), "--target", "org/target")
    assert r.returncode == 0, r.stderr
    assert hub.read_bytes("org/drafter") == 0


def test_a_damaged_file_on_the_hub_is_one_line_and_is_not_cached(hub, env):
    r = ckpt(env, "inspect", "org/damaged")
    assert r.returncode == 2
    first = r.stderr.splitlines()[0]
    assert first.startswith("ckpt: error: org/damaged@") and "model.safetensors: header length" in first
    assert "runs past the end of the file" in first and "Traceback" not in r.stderr
    hub.reset_counts()
    assert ckpt(env, "inspect", "org/damaged").returncode == 2  # read again: a bad header is never cached
    assert any("/cdn/org/damaged/" in q for q in hub.requests)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "org/drafter", "--target", "org/target"],
        ["remap", "org/drafter", "--to", "org/mapping"],
        ["validate", "org/drafter", "--target", "org/target", "--fix"],
    ],
    ids=["export", "remap", "fix"],
)
def test_a_dry_run_of_a_hub_drafter_downloads_nothing_and_plans_what_the_run_reads(hub, env, repos, tmp_path, argv):
    """Issue 31: a dry run reads the config, the headers and d2t/t2d by range into memory, and writes
    nothing in huggingface_hub's cache or ckpttools' own; its plan names the side files and tensors
    that the run, once it has downloaded the snapshot, plans too."""
    (repos["drafter"] / "tokenizer.json").write_text("{}")  # in the run's snapshot: kept
    (repos["drafter"] / "README.md").write_text("not in the run's snapshot\n")  # so not planned either
    hub.repos["org/drafter"] = Repo.from_dir(repos["drafter"])
    try:
        out = str(tmp_path / "out")
        r = ckpt(env, *argv, "-o", out, "--dry-run", "--json")
        assert r.returncode == 0, r.stderr
        dry = json.loads(r.stdout)
        assert _tree(Path(env["HF_HOME"])) == [] and _tree(Path(env["CKPT_CACHE"])) == []
        size = (repos["drafter"] / "model.safetensors").stat().st_size
        assert 0 < hub.read_bytes("org/drafter", "model.safetensors") < size / 2  # headers and the map only
        assert not Path(out).exists()
        # the run downloads its snapshot and plans from it: a dry run of that snapshot plans the same
        r = ckpt(env, *argv, "-o", str(tmp_path / "real"))
        assert r.returncode == 0, r.stderr
        (snap,) = (Path(env["HF_HOME"]) / "hub" / "models--org--drafter" / "snapshots").iterdir()
        r = ckpt(env, argv[0], str(snap), *argv[2:], "-o", out, "--dry-run", "--json")
        assert r.returncode == 0, r.stderr
        local = json.loads(r.stdout)
        assert dry["side_files"] == local["side_files"]
        assert {"name": "tokenizer.json", "kept": True, "why": None} in dry["side_files"]
        assert "README.md" not in [f["name"] for f in dry["side_files"]]
        assert [(t["name"], t["shape"], t["source"]["kind"]) for t in dry["tensors"]] == [
            (t["name"], t["shape"], t["source"]["kind"]) for t in local["tensors"]
        ]
        written = {p.name for p in (tmp_path / "real").iterdir()}
        assert "tokenizer.json" in written and "README.md" not in written
    finally:
        (repos["drafter"] / "tokenizer.json").unlink()
        (repos["drafter"] / "README.md").unlink()
