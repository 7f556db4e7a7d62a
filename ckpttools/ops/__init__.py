"""The operations, one module per command: inspect, validate, fix, remap, export, verify.

Import the operations from :mod:`ckpttools` itself; these module names are not the
public API (``ckpttools.validate`` is the function, never this package's module).
"""
