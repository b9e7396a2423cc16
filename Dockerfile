# The team service as a container: the release executable (glibc 2.17 and up) on a Debian 12 base with
# the OpenSSH client the clusters are reached through. No registry is needed: dev/image makes the base
# from a Debian root (debootstrap) and builds this file offline; dev/release runs it.
#
#   bash dev/release                 # or: bash dev/image EXE   (→ localhost/tao-slurm:0.1.0)
#   podman run -d --name tao-slurm -p 8570:8570 -p 127.0.0.1:9464:9464 \
#     -v tao-slurm:/var/lib/tao-slurm localhost/tao-slurm
#
# Everything the service keeps lives in the volume /var/lib/tao-slurm (state file, service database,
# orgs' SSH keys; put clusters.toml, .env and the SSH key under /var/lib/tao-slurm/.config/tao/).
# `podman stop` sends SIGTERM: the service stops taking requests and finishes those in flight.
# deploy/tao-slurm-kube.yaml runs it beside PostgreSQL (`podman play kube`).
ARG BASE=localhost/tao-slurm-base:bookworm
FROM ${BASE}
RUN useradd --system --uid 10001 --home-dir /var/lib/tao-slurm --create-home tao \
    && chmod 700 /var/lib/tao-slurm
COPY tao-slurm /usr/local/bin/tao-slurm
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
