# The team service as a container: the release binary on Debian 12's slim image (the binary is built
# on Debian 12 and needs only its glibc), with the OpenSSH client the clusters are reached through.
#
#   cargo build --release && docker build -t tao-slurm .
#   docker run -d --name tao-slurm -p 8570:8570 -p 127.0.0.1:9464:9464 \
#     -v tao-slurm:/var/lib/tao-slurm tao-slurm
#
# Everything the service keeps lives in the volume /var/lib/tao-slurm (state file, service database,
# orgs' SSH keys; put clusters.toml, .env and the SSH key under /var/lib/tao-slurm/.config/tao/).
# `docker stop` sends SIGTERM: the service stops taking requests and finishes those in flight.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/tao-slurm --create-home tao \
    && chmod 700 /var/lib/tao-slurm
COPY target/release/tao-slurm /usr/local/bin/tao-slurm
USER tao
ENV HOME=/var/lib/tao-slurm \
    TAO_SLURM_STATE=/var/lib/tao-slurm/state.db \
    TAO_SLURM_CONTROL_DIR=/tmp/tao-slurm-cm
VOLUME /var/lib/tao-slurm
# The API (plain HTTP: put a TLS proxy in front) and /metrics (publish it only to the scraper).
EXPOSE 8570 9464
STOPSIGNAL SIGTERM
ENTRYPOINT ["tao-slurm"]
CMD ["serve", "--bind", "0.0.0.0", "--metrics-addr", "0.0.0.0:9464"]
