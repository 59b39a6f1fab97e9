# podserve server image. Two bases from one file (docs/kubernetes.md, "The image"):
#   CPU : docker build -t podserve:0.1.0 .
#   CUDA: docker build -t podserve:0.1.0-cuda \
#           --build-arg BASE_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04 \
#           --build-arg EXTRAS=torch \
#           --build-arg TORCH_SPEC="torch==2.8.*" \
#           --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 .
# Conventions shared with the rendered manifests (src/podserve/kube/conventions.py):
# HTTP 8000, gRPC 8001, cache /cache, model repository /models, settings
# /etc/podserve/settings.yaml, uid/gid 10001, read-only root filesystem friendly.

ARG BASE_IMAGE=python:3.12-slim-bookworm

# Both bases end up with the same python3: the slim image ships it, the CUDA (Ubuntu 24.04)
# image gets the distribution's 3.12. Building the venv on the runtime base keeps its
# interpreter path valid in the final stage.
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN if ! command -v python3 >/dev/null || ! python3 -c "import venv" 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi

FROM base AS build
# sklearn + onnx runtimes, s3 and hf fetchers, and `podserve eval` for the eval CronJob;
# add torch (or llm) for the torch and language-model runtimes.
ARG EXTRAS="sklearn,onnx,s3,hf,eval"
ARG TORCH_SPEC=""
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /src
RUN python3 -m venv /opt/podserve
ENV PATH=/opt/podserve/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, from the index matching the base (CPU or a CUDA build), so that the extra
# below never resolves a multi-GB default wheel. TORCH_SPEC carries the pin.
# hadolint ignore=DL3013
RUN if [ -n "${TORCH_SPEC}" ]; then pip install "${TORCH_SPEC}" --index-url "${TORCH_INDEX_URL}"; fi
COPY pyproject.toml README.md ./
COPY src ./src
# The project itself, at the version in pyproject.toml; its dependencies follow its bounds.
# hadolint ignore=DL3013
RUN pip install ".${EXTRAS:+[${EXTRAS}]}"

FROM base AS runtime
ENV PATH=/opt/podserve/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PODSERVE_HOST=0.0.0.0 \
    PODSERVE_PORT=8000 \
    PODSERVE_GRPC_PORT=8001 \
    PODSERVE_CACHE_DIR=/cache
RUN groupadd --system --gid 10001 podserve \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin podserve \
    && mkdir -p /cache /models /etc/podserve \
    && chown 10001:10001 /cache
COPY --from=build /opt/podserve /opt/podserve
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000 8001
# The model cache: a Kubernetes volume (hostPath, PVC or emptyDir) in production.
VOLUME ["/cache"]
# Kubernetes sends SIGTERM after the preStop sleep; podserve drains on it.
STOPSIGNAL SIGTERM
# Kubernetes probes /startup, /healthz and /ready; a Docker HEALTHCHECK would duplicate them.
HEALTHCHECK NONE
ENTRYPOINT ["podserve"]
CMD ["serve"]
