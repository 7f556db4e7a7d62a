"""Bytes and boundaries: reading and writing, with no engine knowledge.

- Reading: the safetensors header reader, the checkpoint (a directory, a file, a sharded index or
  a Hub repo; shards opened once, lazily), Hub repos and references, and the input boundary every
  user JSON file and number goes through (``inputs``, ``env``, ``figures``).
- Writing: the write plan, a value (``write_plan``), checked against the file system before a
  byte is written (``preflight``) and written by the one executor (``plan``); the streaming
  writer, the manifest, the output guard, and the file-system primitives (regular files, atomic
  renames, temporaries).
- The network client every HTTP request goes through (``net``), byte units, the version.
"""
