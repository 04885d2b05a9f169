"""Stage 2 of a request, prompt shaping, and its tools: canonical JSON (:mod:`~cachekit.shape.canonical`),
the prompt as blocks in prefix order (:mod:`~cachekit.shape.blocks`), prefix lint
(:mod:`~cachekit.shape.lint`) and diff (:mod:`~cachekit.shape.diff`), breakpoint planning
(:mod:`~cachekit.shape.planner`) with each provider's marker syntax (:mod:`~cachekit.shape.markers`)
and the lifetimes chosen from a tenant's timing (:mod:`~cachekit.shape.lifetimes`), and token
estimates (:mod:`~cachekit.shape.tokens`).

The pipeline's shaping stage (:mod:`cachekit.pipeline.shape`) runs them on each request.
"""
