"""Tiny real checkpoints built from configs, and the shipped story replayed by ``ckpt demo``."""
