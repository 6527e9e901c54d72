#!/usr/bin/env bash
# Installs the npm dependencies (npm ci, from package-lock.json) when needed,
# checks the types and bundles the page for the browser, offline:
# OUT_DIR/index.html and OUT_DIR/app.js (default OUT_DIR: dist/ here).
# Usage: examples/browser/build.sh [OUT_DIR]; then serve OUT_DIR from any
# static server and open index.html?server=http://127.0.0.1:8080
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.lock-installed; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.lock-installed
fi
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
node_modules/.bin/tsc -p .
node_modules/.bin/esbuild src/page.ts --bundle --format=esm --target=es2022 \
  --preserve-symlinks --sourcemap --log-level=warning --outfile="$out/app.js"
cp index.html "$out/index.html"
