"""Vocabulary mappings (d2t/t2d): the mapping itself, diff and build from token frequencies,
matching the tokens of two tokenizers by their bytes, and chat templates rendered as
transformers renders them."""
