#!/usr/bin/env bash
# The repository's Python environment for tests and benchmarks (.venv): the official MCP client (a
# real client for tests/mcp), pytest and PyYAML, TAO's REST client for tests/tao_client, pinned in
# dev/python-requirements.txt and dev/python-requirements-nodeps.txt. Idempotent:
# does nothing when .venv already holds exactly these pins. Prints the venv's python path.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
req=dev/python-requirements.txt
nodeps=dev/python-requirements-nodeps.txt
stamp="$venv/.installed-requirements"
if [ -x "$venv/bin/python" ] && cat "$req" "$nodeps" | cmp -s - "$stamp"; then
    echo "$PWD/$venv/bin/python"
    exit 0
fi
# Debian's python3 ships venv (and its pip bootstrap) in a separate package.
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    echo "dev/python-env.sh: installing python3-venv" >&2
    dev/apt-get update -qq >&2 && dev/apt-get install -y -qq python3-venv >&2
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
# Packages whose declared dependencies are heavier than what they use (see the file).
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$nodeps" >&2
cat "$req" "$nodeps" >"$stamp"
echo "$PWD/$venv/bin/python"
