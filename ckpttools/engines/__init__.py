"""Serving engines: one object per engine (engine.py: launch argv, readiness, release detection,
cache flush, figures, swap, target digest, log grammar), their release tables and claims, HTTP clients
for SGLang and vLLM, starting a server, and swapping its drafter."""
