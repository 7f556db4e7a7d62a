"""The operations: what each command does, as a library call that returns plain data.

- Conversion: inspect, validate (the entry point in ``validate``, its checks by section in
  ``validate_config``, ``validate_tensors``, ``validate_target``, the report in
  ``validate_report``), fix (``validate --fix``), remap, export (``export``, ``export_trtllm``,
  and what both share in ``export_common``).
- Measuring: verify through a server, probe (offline, torch), compare (several drafters on one
  target), sweep, traffic (concurrency and context bins), logs (``logs``, ``logs_fast``,
  ``logs_windows``) and plot.

Import the operations from :mod:`ckpttools` itself; these module names are not the
public API (``ckpttools.validate`` is the function, never this package's module).
"""
