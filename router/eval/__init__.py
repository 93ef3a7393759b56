"""Offline evaluation of routers on outcome data (``mixroute eval``).

Layout (one idea per module):

- :mod:`router.eval.data` — outcome data as score/cost arrays, with the bad-input checks;
- :mod:`router.eval.metrics` — NDCH, AIQ (RouterBench), PGR, APGR, CPT (RouteLLM), sources cited;
- :mod:`router.eval.sweep` — router scores -> operating points (RouteLLM quantile
  thresholds; RouterBench willingness-to-pay);
- :mod:`router.eval.routers` — the routers compared, one module each, in a registry;
- :mod:`router.eval.embed` — prompt embeddings (MiniLM, or feature hashing), cached on disk;
- :mod:`router.eval.summary` — a run's metrics with bootstrap confidence intervals;
- :mod:`router.eval.runner` — :func:`evaluate`, the whole pipeline;
- :mod:`router.eval.report` — JSON rows, Markdown report, plot;
- :mod:`router.eval.whatif` and :mod:`router.eval.offpolicy` — ``policy what-if``: re-decide logged
  requests, and estimate the new policy's realised quality and cost (IPS, doubly robust).

Nothing here imports FastAPI; torch is imported only by the MiniLM embedder and the
``mixroute`` router's heads, when used.
"""
