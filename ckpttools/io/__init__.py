"""Bytes on disk: the safetensors header reader, the checkpoint (files, shards, lazy reads),
the streaming writer, the manifest, and the file-system primitives (regular files,
atomic renames, temporaries)."""
