"""The conversion operations: what each command that reads or writes a checkpoint does, as a
library call that returns plain data.

- inspect; validate (the entry point in ``validate``, its checks by section in
  ``validate_config``, ``validate_tensors``, ``validate_target``, the report in
  ``validate_report``, the quantized weights' checks in ``quant_check``); fix
  (``validate --fix``); remap (the quantized rows in ``quant_remap``); export (``export``,
  ``export_trtllm``, what both share in ``export_common``, the quantized weights in
  ``quant_export``); quantize.

Measuring (verify, probe, compare, sweep, serve and swap, logs, plot, the verdict) is the layer
above, :mod:`ckpttools.measuring`; nothing here imports it (tests/test_layers.py).

Import the operations from :mod:`ckpttools` itself; these module names are not the
public API (``ckpttools.validate`` is the function, never this package's module).
"""
