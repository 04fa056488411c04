# syntax=docker/dockerfile:1
# srformer-serve images.
#   docker build --target cpu  -t srformer-serve:cpu  .   (default; Debian bookworm + Debian's LibTorch)
#   docker build --target cuda -t srformer-serve:cuda .   (PyTorch CUDA image + its bundled LibTorch)
# Run: docker run -p 50051:50051 -p 9464:9464 -v /path/to/models:/models:ro srformer-serve:cpu \
#        --model bart=/models/bart
# Health: the gRPC health service (grpc.health.v1) via `srformer-client --health`; Kubernetes uses its
# native grpc probe instead (deploy/k8s). Metrics: /metrics on 9464. See docs/OPERATIONS.md.

# PyTorch >= 2.7: its LibTorch uses the C++11 ABI like Debian's libraries (deploy/gpu/build.sh checks).
ARG PYTORCH_TAG=2.7.1-cuda12.8-cudnn9

########## CUDA: Debian packages for the GPU build (same logic as deploy/gpu) ##########
FROM debian:bookworm AS cuda-debs
COPY deploy/gpu/fetch-debs.sh /src/deploy/gpu/fetch-debs.sh
RUN apt-get update -qq && bash /src/deploy/gpu/fetch-debs.sh /bundle && rm -rf /var/lib/apt/lists/*

########## CUDA: build against PyTorch's LibTorch ##########
FROM pytorch/pytorch:${PYTORCH_TAG}-devel AS cuda-build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ninja-build \
 && rm -rf /var/lib/apt/lists/* && pip install --no-cache-dir "cmake>=3.18"
COPY --from=cuda-debs /bundle /bundle
COPY . /src
RUN bash /src/deploy/gpu/build.sh --bundle /bundle --prefix /opt/srformer-deps --build /build \
      --install /opt/srformer --no-tests

########## CUDA: runtime ##########
FROM pytorch/pytorch:${PYTORCH_TAG}-runtime AS cuda
# The binaries' RPATH points at /opt/srformer-deps and torch's lib dir, both at the same paths as in the build.
COPY --from=cuda-build /opt/srformer-deps /opt/srformer-deps
COPY --from=cuda-build /opt/srformer /opt/srformer
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin srformer \
 && mkdir -p /models && chown srformer /models
ENV PATH=/opt/srformer/bin:$PATH
USER 10001
VOLUME ["/models"]
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
  CMD ["srformer-client", "--target", "localhost:50051", "--health"]
# Listens on the server defaults, gRPC 0.0.0.0:50051 and metrics 0.0.0.0:9464.
ENTRYPOINT ["srformer-server", "--device", "cuda"]
CMD ["--help"]

########## CPU: build ##########
FROM debian:bookworm AS cpu-build
# Dependencies first (own layer, cached until the script changes).
COPY deploy/setup-deps.sh /src/deploy/setup-deps.sh
RUN bash /src/deploy/setup-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/opt/srformer \
      -DSRFORMER_BUILD_TESTS=OFF -DSRFORMER_BUILD_BENCH=OFF \
 && cmake --build /build --target srformer-server srformer-client srformer srformer_spm \
 && cmake --install /build --strip

########## CPU: runtime (last stage, so the default target) ##########
FROM debian:bookworm AS cpu
COPY deploy/setup-deps.sh /tmp/setup-deps.sh
RUN bash /tmp/setup-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/setup-deps.sh
# bin/ and lib/libsrformer_spm.so (found next to the binaries via ../lib).
COPY --from=cpu-build /opt/srformer /opt/srformer
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin srformer \
 && mkdir -p /models && chown srformer /models
ENV PATH=/opt/srformer/bin:$PATH
USER 10001
VOLUME ["/models"]
EXPOSE 50051 9464
# gRPC health check. A grpc_health_probe binary, if you add one to the image, works the same:
#   grpc_health_probe -addr=localhost:50051
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["srformer-client", "--target", "localhost:50051", "--health"]
# Listens on the server defaults, gRPC 0.0.0.0:50051 and metrics 0.0.0.0:9464.
ENTRYPOINT ["srformer-server"]
CMD ["--help"]
