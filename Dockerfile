# cachekit proxy in a container (docs/proxy.md, "Running it in a container").
#
#   docker build -t cachekit-proxy .
#   docker run --rm -p 8787:8787 --stop-timeout 130 cachekit-proxy --store redis://redis:6379/0 --workers 4
#
# Arguments after the image name are added to `cachekit proxy` (--store, --workers, --config FILE, ...).
# Stateless with a Redis store: run as many replicas as needed over one Redis (or Redis Cluster).
# --stop-timeout above graceful_timeout (120 s): a SIGTERM lets streams in flight finish first.

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY cachekit ./cachekit
# A wheel of this checkout with the extras a deployed proxy uses, built apart from the image it runs in.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[proxy,redis,prices]"

FROM python:3.12-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/cachekit --create-home cachekit
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "cachekit-llm[proxy,redis,prices]" \
    && rm -rf /wheels
USER cachekit
# The ledger (SQLite, when no other sink is set) and the price table live here: mount a volume to keep them.
ENV CACHEKIT_HOME=/var/lib/cachekit PYTHONUNBUFFERED=1
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2).status != 200)"]
# exec form: the proxy is PID 1 and gets the SIGTERM itself (graceful shutdown).
ENTRYPOINT ["cachekit", "proxy", "--host", "0.0.0.0", "--port", "8787"]
