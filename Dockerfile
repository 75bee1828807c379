# Teammate's image: the README's two commands work inside it (`scripts/teammate …` runs
# Teammate, `scripts/test` the tests), bubblewrap and ripgrep are installed, it runs as an
# unprivileged user, and the data directory is a volume.
#
#   docker build -t teammate .
#   docker run --env-file .env -v teammate-data:/app/data teammate serve
#
# The bash tool's sandbox (bubblewrap) needs unprivileged user namespaces, which Docker's
# default seccomp profile refuses: give the container a profile that allows them (or
# `--security-opt seccomp=unconfined`, and on hosts that restrict them through AppArmor,
# `--security-opt apparmor=unconfined`). Without that, `[tools.bash] sandbox = "auto"` offers
# no bash and says so in one line at start-up; nothing runs unconfined unless you set
# `sandbox = "off"` (docs/security.md). The file tools need none of this.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    TEAMMATE_DATA_DIR=/app/data \
    UV_LINK_MODE=copy

WORKDIR /app
COPY . /app

# As root, once: the system packages (bubblewrap, ripgrep, PostgreSQL's server programs for
# the tests' throwaway cluster) and the locked virtualenv, exactly as on any machine.
RUN scripts/setup \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --user-group teammate \
    && mkdir -p /app/data \
    && chown -R teammate:teammate /app/data

USER teammate
VOLUME ["/app/data"]
ENTRYPOINT ["scripts/teammate"]
CMD ["serve"]
