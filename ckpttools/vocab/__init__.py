"""Vocabulary mappings (d2t/t2d): the mapping itself, diff and build, token matching."""
