"""The exact response cache's parts: keys and partitions (:mod:`~cachekit.exact.keys`),
single-flight (:mod:`~cachekit.exact.flights`), answers as stored and replayed: the provider's
echoed prompt (:mod:`~cachekit.exact.echo`) and SSE streams (:mod:`~cachekit.exact.sse`).

The pipeline's key, exact lookup, upstream and store stages (:mod:`cachekit.pipeline`) use them.
"""
