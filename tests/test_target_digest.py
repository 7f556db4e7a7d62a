"""The server-side digest and device read-back (ckpttools/engines/serverside/ckpt_digest.py), run
here on CPU torch: the code that runs inside the engines, on real torch modules."""

from __future__ import annotations

import importlib.util

import pytest

from ckpttools.engines.swap import SERVERSIDE

torch = pytest.importorskip("torch")


def _mod():
    spec = importlib.util.spec_from_file_location("ckpt_digest_under_test", SERVERSIDE / "ckpt_digest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


D = _mod()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Embedding(50, 12), torch.nn.Linear(12, 7), torch.nn.LayerNorm(7))
    m = m.to(torch.bfloat16)
    m.register_buffer("ids", torch.arange(13, dtype=torch.int64))  # persistent: digested
    m.register_buffer("cache", torch.randn(5), persistent=False)  # a cache: not digested
    m.register_buffer("odd", torch.ones(3, dtype=torch.uint8))  # 3 bytes: the zero-padded tail word
    return m


def test_the_digest_covers_every_parameter_and_persistent_buffer_and_is_stable() -> None:
    m = _model()
    a, b = D.model_digest(m), D.model_digest(m)
    assert a == b
    params = sum(p.numel() * p.element_size() for p in m.parameters())
    assert a["parameters"] == 5 and a["buffers"] == 2 and a["packed"] == 0
    assert a["bytes"] == params + 13 * 8 + 3
    assert set(a["sums"]) == {"0.weight", "1.weight", "1.bias", "2.weight", "2.bias", "ids", "odd"}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16, torch.int64, torch.bool, torch.uint8])
@pytest.mark.parametrize("numel", [1, 7, 8, 1000, 4099])
def test_any_one_element_change_changes_the_sums(dtype, numel) -> None:
    """Every element position, one at a time (the first, the last, one in the padded tail)."""
    t = (torch.arange(numel) % 3).to(dtype)
    base = D.tensor_sums(t).tolist()
    for i in sorted({0, numel // 2, numel - 1}):
        u = t.clone()
        u[i] = ~u[i] if dtype == torch.bool else u[i] + 1
        assert D.tensor_sums(u).tolist() != base, (dtype, numel, i)


def test_the_sums_change_when_two_values_trade_places_and_not_with_the_chunking(monkeypatch) -> None:
    t = torch.arange(100, dtype=torch.int32)
    u = t.clone()
    u[[4, 70]] = u[[70, 4]]  # both the low half of their 64-bit word
    assert D.tensor_sums(t)[0] == D.tensor_sums(u)[0]  # S1 alone cannot see a move
    assert D.tensor_sums(t)[1] != D.tensor_sums(u)[1]  # S2's position weights do
    whole = D.tensor_sums(t).tolist()
    monkeypatch.setattr(D, "CHUNK", 8)  # chunks of 8 words: the offsets carried, the same sums
    monkeypatch.setattr(D, "_WEIGHTS", {})
    assert D.tensor_sums(t).tolist() == whole


def test_a_changed_element_of_a_model_is_named() -> None:
    m = _model()
    before = D.model_digest(m)
    with torch.no_grad():
        m[1].weight.view(-1)[5] += 1
    after = D.model_digest(m)
    assert after["digest"] != before["digest"]
    assert [n for n in after["sums"] if after["sums"][n] != before["sums"][n]] == ["1.weight"]


class _Packed(torch.nn.Module):
    """A linear layer whose weight was moved into a kernel format after loading, as vLLM's CPU
    build does (an empty ``weight`` parameter; ``quant_method.apply`` runs the layer)."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.packed = w.t().contiguous()  # another layout
        self.weight = torch.nn.Parameter(torch.empty(0, dtype=w.dtype), requires_grad=False)
        self.input_size_per_partition = w.shape[1]
        layer = self

        class QM:
            def apply(self, m, x, bias=None):
                return x @ layer.packed

        self.quant_method = QM()


def test_the_read_back_holds_bytes_casts_and_packed_layers_against_the_file() -> None:
    g = torch.Generator().manual_seed(1)
    w32 = torch.randn(96, 256, generator=g)
    assert D.check_param(w32.clone(), [w32], None, False) == ("bytes", True)
    assert D.check_param(w32.to(torch.bfloat16), [w32], None, False) == ("cast", True)
    q, k = w32[:64], w32[64:]
    assert D.check_param(w32.clone(), [q, k], None, False) == ("bytes", True)  # stacked parts in order
    assert D.check_param(w32.clone(), [k, q], None, False) == ("bytes", False)
    bad = w32.to(torch.bfloat16)
    bad.view(-1)[17] += 1
    assert D.check_param(bad, [w32], None, False) == ("cast", False)
    packed = _Packed(w32.to(torch.bfloat16))
    assert D.check_param(packed.weight, [q, k], packed, False) == ("applied", True)
    other = _Packed(torch.randn(96, 256, generator=g).to(torch.bfloat16))
    assert D.check_param(other.weight, [q, k], other, False) == ("applied", False)
    near = w32.clone()
    near[:, 3] *= 1.5  # one input column off by half: far outside the dtype's tolerance
    assert D.check_param(packed.weight, [near], packed, False) == ("applied", False)
    assert D.check_param(packed.weight, [w32], packed, True) == ("applied", True)  # replicated at TP > 1: compared
    row = _Packed(w32[:, :128].to(torch.bfloat16))  # a row shard: half the file's input columns
    assert D.check_param(row.weight, [w32], row, True) == ("sharded", True)
    assert D.check_param(row.weight, [w32], row, False)[0] == "applied"  # at TP 1 no shard: not held
    col = _Packed(w32[:48].to(torch.bfloat16))
    col.output_size_per_partition = 48
    assert D.check_param(col.weight, [w32], col, True) == ("sharded", True)
    assert D.check_param(torch.zeros(48, 256), [w32], None, True) == ("sharded", True)
    assert D.packed_linears(torch.nn.Sequential(packed)) == {"0": packed}
    got = D.model_digest(torch.nn.Sequential(packed))
    assert got["packed"] == 1 and "0.weight<applied>" in got["sums"]


def test_a_padded_vocabulary_is_held_by_its_leading_rows() -> None:
    w = torch.randn(100, 16)
    padded = torch.zeros(128, 16)
    padded[:100] = w
    assert D.check_param(padded, [w], None, False) == ("bytes", True)
    padded[3, 4] += 1
    assert D.check_param(padded, [w], None, False) == ("bytes", False)
