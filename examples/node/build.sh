#!/usr/bin/env bash
# Installs the npm dependencies (npm ci, from package-lock.json) when needed
# and compiles the example. Usage: examples/node/build.sh [OUT_DIR]
# (default: dist/ here). Run with: node OUT_DIR/dist/client.js ...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.lock-installed; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.lock-installed
fi
if [ $# -eq 0 ]; then
  exec node_modules/.bin/tsc -p .
fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
rm -rf "$out/dist"
node_modules/.bin/tsc -p . --outDir "$out/dist"
# The compiled code resolves its imports from the nearest node_modules.
ln -sfn "$here/node_modules" "$out/node_modules"
printf '{"type":"module"}\n' > "$out/package.json"
