"""What each serving engine does with a drafter, and talking to it: the facts as data, each
cited to the engine's file:line, and the clients that reach a running server.

- Facts: one table per engine release (``releases``, with its claim texts in ``claim_texts`` and
  :func:`~ckpttools.engines.claims.claim` to say one for the release applied), where each engine
  captures the target's hidden states (``aux_rules``), which tensor names it loads (``names``), how
  it reads a config (``config_rules``; one config's facts read once for validate's checks: ``config_facts``,
  and a drafter or target opened once: ``opened``), what it builds from a drafter (``load_plan``), the config
  repairs export and fix share (``repairs``), which layout a checkpoint is in (``flavor``), and the
  server-log line formats (``logs_formats``).
- Engines: one object per engine (``engine``: SGLang, vLLM and the offline torch probe, each built
  from its release table: launch argv, readiness, release detection, cache flush, how to read its
  figures, its swap, the target digest, its log grammar); ops/, measuring/ and cli/ ask it and
  never compare engine names (tests/test_engine_branches.py).
- Servers: HTTP clients for SGLang and vLLM (``http``), starting and stopping one (``launch``),
  swapping a drafter into a running one (``swap``, and ``serverside``, which runs inside the
  engine's own process).

No module outside this package names an engine release or model class
(tests/test_engine_names.py).
"""
