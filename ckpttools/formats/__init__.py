"""What a drafter's files say, engine-neutral: ckpttools' canonical tensor names and the
training-only ones (``names``), the config.json fields wherever a format keeps them and their
checks (``config``), and conventions written once: config dtype names, where a target's config
is read from (``conventions``). What an engine makes of them is in :mod:`ckpttools.engines`."""
