# dserve: multi-stage build on Debian 12.
#   docker build -t dserve .
#   docker run -p 5001:5001 -p 9090:9090 -v /path/to/models:/models dserve \
#       --model intents=/models/intents --model qa=/models/qa
# Every RUN below is a command the test suite also runs (install script,
# build script, the server start), so a green CI covers this file too,
# although no Docker engine runs in this workplace.

FROM debian:12 AS builder
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN DSERVE_BUILD_DIR=/build bash deploy/build.sh -DDSERVE_BUILD_TESTS=OFF

FROM debian:12-slim AS runtime
# Only the shared libraries the binaries link (LibTorch pulls its own set).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libtorch1.13 libopenblas0-openmp libgrpc++1.51 libprotobuf32 libabsl20220623 \
      libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libyaml-cpp0.7 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /nonexistent --shell /usr/sbin/nologin dserve
COPY --from=builder /build/bin/dserve /build/bin/dserve-client /usr/local/bin/
USER 10001
VOLUME ["/models"]
EXPOSE 5001 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["dserve-client", "--target", "127.0.0.1:5001", "--timeout-ms", "2000", "health"]
ENTRYPOINT ["dserve", "serve", "--listen", "0.0.0.0:5001", "--metrics-listen", "0.0.0.0:9090"]
