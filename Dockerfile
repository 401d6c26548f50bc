# The gateway on a slim Python base, as a non-root user, with the same install as the README.
FROM python:3.11-slim

# PyTorch's CPU-only wheels keep the image small; point this at a CPU wheel index if your
# registry serves one (torch==2.13.0 from the default index may pull CUDA libraries).
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

RUN useradd --create-home --uid 10001 gateway
WORKDIR /app

COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install ${PIP_EXTRA_INDEX_URL:+--extra-index-url "$PIP_EXTRA_INDEX_URL"} . \
    && rm -rf /root/.cache

# Baked default; mount your own over it: -v $PWD/config.yaml:/app/config.yaml:ro
COPY config.yaml ./config.yaml
# The cache store (SQLite) lives here; mount a volume to keep it across containers.
RUN mkdir -p /app/data && chown gateway:gateway /app/data
VOLUME /app/data

USER gateway
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"

CMD ["python", "-m", "gateway", "serve", "--config", "/app/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
