"""Tiny real checkpoints built from configs (drafters in every layout, targets, sharded and sparse
"huge" ones: for tests, examples and benchmarks), and the shipped story replayed by ``ckpt demo``."""
