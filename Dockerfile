# MAIL server image (docs/docker.md).
#   docker build -t mail-server .
#   docker run -p 8000:8000 -v mail-data:/data mail-server
# BASE must be a Debian-like image with python3 (3.11 or newer) and pip: the official Python image
# by default; CI builds the same file on a local debootstrap base (--build-arg BASE=...).
ARG BASE=python:3.12-slim

# ---- build: a virtual environment with the locked dependencies and the package, made by uv ----
FROM ${BASE} AS build
ARG UV_VERSION=0.13.9
# Extras of the package to install, as uv flags ("--extra fast --extra cluster" adds Ray).
ARG MAIL_EXTRAS="--extra fast"
# Package index settings are passed through when given (a mirror or a proxying index); without
# them pip and uv use PyPI. uv.lock pins every file by hash, so a mirror cannot change what lands.
ARG PIP_INDEX_URL
ARG UV_INDEX_URL
ARG UV_DEFAULT_INDEX
# 1 = strip debug symbols from the extension modules (about 60 MB; needs Debian's binutils,
# installed from the base's apt sources in this stage only). 0 = leave them as the wheels ship them.
ARG MAIL_STRIP=1
ENV UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=python3 \
    UV_PROJECT_ENVIRONMENT=/opt/mail/venv \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN if [ "${MAIL_STRIP}" = 1 ]; then \
      apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends binutils >/dev/null \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# PIP_BREAK_SYSTEM_PACKAGES: a Debian python3 refuses system-wide pip installs without it; uv
# only lives in this stage.
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet "uv==${UV_VERSION}"
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the lock changes. Slimmed in the same
# step (docs/docker.md, "Image size"): litellm's proxy admin web UI (unused by its SDK) and the
# debug symbols of the extension modules go.
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project ${MAIL_EXTRAS} \
 && rm -rf /opt/mail/venv/lib/python3*/site-packages/litellm/proxy/_experimental/out \
 && find /opt/mail/venv -name '__pycache__' -type d -prune -exec rm -rf {} + \
 && if [ "${MAIL_STRIP}" = 1 ]; then \
      find /opt/mail/venv -name '*.so*' -type f -exec strip --strip-unneeded {} +; \
    fi
COPY README.md ./
COPY src ./src
# Served as /openapi.json and /docs: the wheel force-includes it (pyproject.toml).
COPY spec/openapi.yaml ./spec/openapi.yaml
COPY docker/precompile.py /tmp/precompile.py
# The package itself, then .pyc files only for what the server imports.
RUN uv sync --frozen --no-dev --no-editable ${MAIL_EXTRAS} \
 && PYTHONDONTWRITEBYTECODE=1 LITELLM_LOCAL_MODEL_COST_MAP=True \
      /opt/mail/venv/bin/python /tmp/precompile.py

# ---- runtime: the base, the venv, the default config; no uv, no compiler, no sources ----
FROM ${BASE} AS runtime
ARG MAIL_UID=10001
RUN groupadd --system --gid "${MAIL_UID}" app \
 && useradd --system --uid "${MAIL_UID}" --gid app --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin app \
 && mkdir -p /data \
 && chown app:app /data
COPY --from=build /opt/mail/venv /opt/mail/venv
COPY swarms.json /opt/mail/swarms.json
COPY docker/mail.toml /opt/mail/mail.toml
COPY docker/healthcheck.py /opt/mail/healthcheck.py
# LITELLM_LOCAL_MODEL_COST_MAP: use the model price table shipped in the package instead of
# downloading it at every start (slow, and impossible offline).
ENV PATH=/opt/mail/venv/bin:${PATH} \
    MAIL_CONFIG_PATH=/opt/mail/mail.toml \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# State (API keys and registry under registries/, mail_files/, attachments) is written relative
# to the working directory: mount a volume here to keep it across restarts and upgrades.
WORKDIR /data
VOLUME ["/data"]
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER ${MAIL_UID}:${MAIL_UID}
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python3", "/opt/mail/healthcheck.py"]
# `mail` is PID 1 (exec form, no shell in between): uvicorn handles SIGTERM and SIGINT itself.
STOPSIGNAL SIGTERM
ENTRYPOINT ["mail"]
CMD ["server"]
