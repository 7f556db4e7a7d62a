"""Measuring: what a drafter does, on a server or through the offline probe.

- The request and its runner: ``request`` (:class:`MeasureRequest`: the drafters, the target,
  where the server comes from, one setting or a sweep, the prompts and the bar; built from
  ``ckpt verify``'s options and refused when it cannot be measured) and ``measure`` (the one call
  that runs a request); ``launch_check`` (the one check before a server is started).
- Through a server: ``verify`` (one drafter), ``compare`` (several drafters on one loaded
  target), ``sweep`` (one server per speculative setting, against a baseline), ``traffic``
  (concurrency levels and context-length bins) and ``serve`` (``ckpt serve``, and ``ckpt swap``:
  a drafter refreshed on a server that stays up, then checked).
- With no server: ``probe`` (``ckpt verify --engine torch``, PyTorch).
- From a server's log: ``logs`` (``ckpt logs``; its fast path in ``logs_fast``, its windows in
  ``logs_windows``, the run split at every weight update in ``logs_segments``).
- What both give: ``verdict`` (a figure against its bar, the exit code and the statistics) and
  ``plot`` (``--plot``, matplotlib).

This layer sits above :mod:`ckpttools.ops` (a drafter is validated before it is measured or
swapped in) and below ``demo`` and ``cli``; nothing in ``ops`` imports it (tests/test_layers.py).
Import the calls from :mod:`ckpttools` itself (``ckpttools.measure``, ``ckpttools.verify``, ...);
these module names are not the public API (``ckpttools.measure`` is the function, never this
package's module).
"""
