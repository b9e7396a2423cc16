#!/usr/bin/env bash
# The dashboard's browser tests need Debian's chromium and chromium-driver (headless, driven over
# WebDriver). Idempotent: installs them only when missing.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
echo "dev/browser-env.sh: installing chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
"$(dirname "${BASH_SOURCE[0]}")/apt-get" update -qq >&2
"$(dirname "${BASH_SOURCE[0]}")/apt-get" install -y -qq chromium chromium-driver fonts-dejavu-core >&2
