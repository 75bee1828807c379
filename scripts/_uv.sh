# Sourced by the scripts here: makes `uv` callable as "${UV[@]}", installing it with the
# machine's pip if missing (pip may put it where PATH does not look, so fall back to -m uv).
export UV_PYTHON_DOWNLOADS=never
if command -v uv >/dev/null 2>&1; then
    UV=(uv)
else
    python3 -m uv --version >/dev/null 2>&1 \
        || python3 -m pip install --quiet --disable-pip-version-check uv >&2
    if command -v uv >/dev/null 2>&1; then UV=(uv); else UV=(python3 -m uv); fi
fi
