"""Serving engines: HTTP clients for SGLang and vLLM, and starting a server."""
