"""Runs inside a serving engine's process, beside ckpt_swap.py: a digest of a whole model's weights
taken where they live (on the GPU), and a drafter's parameters held against the file they were
loaded from, on the device. Standard library and torch only.

The digest of one tensor is two 64-bit sums over its raw bytes read as little-endian 64-bit words
``w[i]`` (the last few bytes zero-padded into one more word): ``S1 = sum(w[i])`` and
``S2 = sum((2i + 1) * w[i])``, both modulo 2**64 (torch's int64 arithmetic wraps). A change of one
element changes one word by some ``d != 0 (mod 2**64)``, so S1 changes by ``d`` and S2 by
``(2i + 1) * d``; an odd factor is invertible modulo 2**64, so neither can stay the same: any
one-element change is caught, always, not with some probability. S2's position weights also catch
most moves of values between places (S1 alone would not). Each sum is over integers, so the order
in which the GPU adds them cannot change it: the same bytes give the same digest on every run.

Cost: the words are read once and multiplied by a weight vector made once per device (chunks of
2**24 words, 128 MiB), so the device reads each byte of the model about three times: about
0.25 ms per GiB at the H200's 4 TB/s, some 0.2 s for each GPU's share of a 1-2 TB target split
over 8 GPUs; one transfer of two numbers per tensor comes back to the host at the end.

A model's digest covers every parameter (each tensor object once) and every persistent buffer (the
ones a checkpoint fills; caches such as rotary tables are not persistent). Where an engine has
replaced a linear layer's weight with an opaque kernel format after loading (vLLM's CPU build packs
it for oneDNN and leaves an empty parameter), the layer's output on a fixed random input stands
for its weight: its bytes are summed the same way.
"""

from __future__ import annotations

import hashlib
from typing import Any

#: words per chunk: the weight vector's length and the largest temporary (int64) made
CHUNK = 1 << 24
_WEIGHTS: dict[str, Any] = {}


def _weights(device: Any) -> Any:
    import torch

    key = str(device)
    if key not in _WEIGHTS:
        _WEIGHTS[key] = torch.arange(CHUNK, dtype=torch.int64, device=device) * 2 + 1
    return _WEIGHTS[key]


def _words(t: Any) -> tuple[Any, Any]:
    """(the tensor's bytes as int64 words, its last ``nbytes % 8`` bytes padded into one word)."""
    import torch

    flat = t.detach().reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    b = flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat
    n8 = b.numel() // 8 * 8
    main = b[:n8]
    try:
        words = main.view(torch.int64)
    except RuntimeError:  # a view that does not start on an 8-byte boundary
        words = main.clone().view(torch.int64)
    tail = b[n8:]
    if tail.numel():
        pad = torch.zeros(8, dtype=torch.uint8, device=b.device)
        pad[: tail.numel()] = tail
        return words, pad.view(torch.int64)
    return words, None


def tensor_sums(t: Any) -> Any:
    """``[S1, S2]`` of one tensor (module docstring), an int64 tensor of two on its device."""
    import torch

    words, tail = _words(t)
    w = _weights(words.device)
    s1 = torch.zeros((), dtype=torch.int64, device=words.device)
    s2 = torch.zeros((), dtype=torch.int64, device=words.device)
    n = words.numel()
    parts = [(o, words[o : o + CHUNK]) for o in range(0, n, CHUNK)]
    if tail is not None:
        parts.append((n, tail))
    for o, c in parts:
        c1 = c.sum()
        s1 += c1
        s2 += (c * w[: c.numel()]).sum() + c1 * (2 * o)
    return torch.stack([s1, s2])


def _fixed_input(rows: int, cols: int, dtype: Any, device: Any) -> Any:
    import torch

    g = torch.Generator(device="cpu").manual_seed(20261201)
    return torch.randn(rows, cols, generator=g, dtype=torch.float32).to(dtype=dtype, device=device)


def packed_linears(model: Any) -> dict[str, Any]:
    """Modules whose weight an engine replaced after loading with a kernel format it keeps outside
    the parameters (an empty ``weight`` and a ``quant_method`` that still applies the layer)."""
    out = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        qm = getattr(m, "quant_method", None)
        if w is not None and getattr(w, "numel", lambda: 1)() == 0 and hasattr(qm, "apply"):
            if getattr(m, "input_size_per_partition", None):
                out[name] = m
    return out


def apply_linear(m: Any, x: Any) -> Any:
    """The layer's own product with ``x`` (no bias), through the engine's kernel."""
    import torch

    with torch.no_grad():
        y = m.quant_method.apply(m, x, None)
    return y[0] if isinstance(y, tuple) else y


def model_digest(model: Any) -> dict[str, Any]:
    """``{"parameters", "buffers", "packed", "bytes", "digest", "sums"}`` of a whole model: the digest
    is sha256 over each tensor's name, shape, dtype and sums, in name order; ``sums`` holds each
    tensor's (16 hex digits), so two digests that differ say where."""
    import torch

    tensors: dict[str, Any] = {}
    seen: set[int] = set()
    for n, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in seen:
            seen.add(id(p))
            tensors[n] = p
    params = len(tensors)
    buffers = 0
    for mod_name, mod in model.named_modules():
        skip: set[str] = getattr(mod, "_non_persistent_buffers_set", set())
        for bn, b in mod.named_buffers(recurse=False):
            if b is None or bn in skip or id(b) in seen:
                continue
            seen.add(id(b))
            tensors[f"{mod_name}.{bn}" if mod_name else bn] = b
            buffers += 1
    packed = 0
    for name, m in packed_linears(model).items():
        x = _fixed_input(4, int(m.input_size_per_partition), m.weight.dtype, m.weight.device)
        tensors[f"{name}.weight<applied>"] = apply_linear(m, x)
        packed += 1
    names = sorted(tensors)
    by_device: dict[str, list[tuple[int, Any]]] = {}
    total = 0
    with torch.no_grad():
        for i, n in enumerate(names):
            t = tensors[n]
            total += t.numel() * t.element_size()
            by_device.setdefault(str(t.device), []).append((i, tensor_sums(t)))
    vals: list[list[int]] = [[0, 0]] * len(names)
    for got in by_device.values():  # one copy to the host per device, at the end
        for (i, _), v in zip(got, torch.stack([s for _, s in got]).cpu().tolist()):
            vals[i] = v
    h = hashlib.sha256()
    short = {}
    for n, (a, b) in zip(names, vals):
        t = tensors[n]
        line = f"{n}|{list(t.shape)}|{t.dtype}|{a & (2**64 - 1):016x}{b & (2**64 - 1):016x}\n"
        h.update(line.encode())
        short[n] = hashlib.sha256(line.encode()).hexdigest()[:16]
    return {
        "parameters": params,
        "buffers": buffers,
        "packed": packed,
        "bytes": total,
        "digest": h.hexdigest(),
        "sums": short,
    }


# --- a drafter's parameters held against its file, on the device -------------------------------


def _eps(dtype: Any) -> float:
    import torch

    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def same_bytes(a: Any, b: Any) -> bool:
    import torch

    if a.dtype != b.dtype or a.numel() != b.numel():
        return False
    va = a.detach().reshape(-1).contiguous().view(torch.uint8)
    vb = b.detach().reshape(-1).contiguous().view(torch.uint8)
    return bool(torch.equal(va, vb))


def check_param(param: Any, parts: list[Any], module: Any, sharded: bool) -> tuple[str, bool]:
    """How ``param`` was held against the file tensors ``parts`` (on its device, in shard order,
    concatenated along the first dimension as the engine fuses them), and whether it holds them:

    - ``bytes``: the same dtype and size; every byte equal (a parameter padded past the file's
      rows, as a vocabulary is to a kernel's multiple, is held by its leading rows).
    - ``cast``: the same size in another dtype; equal to the file's values cast to it (as the
      loader's ``copy_`` casts).
    - ``applied``: the weight is held in a kernel format (another size, or none); the layer applied
      to a fixed random input equals the file's weight, cast to the layer's dtype, times the same
      input, within 4 ulp of the dtype times the root of the summed squared products per output,
      plus 1 ulp of the output.
    - ``sharded``: with ``sharded`` (the server runs tensor parallel), a shard of the file's tensor
      (a layer's partition sizes, or its output, are not the file's), not compared; a replicated
      layer at any TP is still compared.
    - ``not compared``: none of these applies."""
    import torch

    with torch.no_grad():
        numel = sum(p.numel() for p in parts)
        rows = sum(int(p.shape[0]) for p in parts) if all(p.dim() == param.dim() >= 1 for p in parts) else -1
        held = param
        if param.numel() > numel and rows > 0 and param.shape[0] > rows and param.shape[1:] == parts[0].shape[1:]:
            held = param[:rows]  # a vocabulary padded to the kernel's multiple: the file's rows lead
        if held.numel() == numel and held.numel() > 0:
            flat = torch.cat([p.reshape(-1) for p in parts]) if len(parts) > 1 else parts[0].reshape(-1)
            if flat.dtype == held.dtype:
                return "bytes", same_bytes(held, flat)
            return "cast", same_bytes(held, flat.to(held.dtype))
        if module is not None and hasattr(getattr(module, "quant_method", None), "apply") and parts[0].dim() == 2:
            w = torch.cat(list(parts), 0) if len(parts) > 1 else parts[0]
            in_pp = int(getattr(module, "input_size_per_partition", w.shape[1]))
            out_pp = int(getattr(module, "output_size_per_partition", w.shape[0]))
            if in_pp != w.shape[1] or out_pp != w.shape[0]:  # a row or column shard of the file's matrix
                return ("sharded", True) if sharded else ("applied", False)
            dtype = param.dtype
            x = _fixed_input(4, w.shape[1], dtype, param.device)
            try:
                y = apply_linear(module, x).float()
            except RuntimeError:  # the layer does not take the file's matrix's input
                return "applied", False
            wf = w.to(dtype).float().to(param.device)
            xf = x.float()
            ref = xf @ wf.T
            if y.dim() == 2 and y.shape[0] == ref.shape[0] and y.shape[1] > ref.shape[1]:
                y = y[:, : ref.shape[1]]  # outputs of padded rows
            if y.shape != ref.shape:
                return ("sharded", True) if sharded else ("applied", False)
            eps = _eps(dtype)
            tol = 4 * eps * ((xf * xf) @ (wf * wf).T).sqrt() + eps * ref.abs() + 1e-30
            return "applied", bool(((y - ref).abs() <= tol).all())
        return ("sharded", True) if sharded else ("not compared", True)
