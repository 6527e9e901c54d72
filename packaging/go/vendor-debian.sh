#!/usr/bin/env bash
# Offline build of a module that requires github.com/omni-grpc/omni-grpc/generated/go,
# against the Go packages Debian installs under /usr/share/gocode
# (golang-google-grpc-dev, golang-google-protobuf-dev,
# golang-github-golang-protobuf-1-5-dev, ...). Run it in your module's root
# (the folder with go.mod), then build with GOFLAGS=-mod=vendor GOPROXY=off.
#
# A plain require + replace cannot build offline: go still resolves grpc and
# protobuf (and grpc's own requirements, which Debian does not ship) through
# the module proxy. This makes vendor/: a symlink per dependency into
# /usr/share/gocode, this module linked from where this script lives, and the
# modules.txt that -mod=vendor checks against go.mod.
set -euo pipefail
module=$(cd "$(dirname "$0")" && pwd)
gocode=${GOCODE:-/usr/share/gocode/src}
[ -f go.mod ] || { echo "vendor-debian.sh: run it in your module's root (no go.mod here)" >&2; exit 1; }
if [ ! -d "$gocode/google.golang.org/grpc" ]; then
  echo "vendor-debian.sh: $gocode/google.golang.org/grpc is missing; install golang-google-grpc-dev" >&2
  exit 1
fi
if ! grep -q 'ProtoReflect' "$gocode/github.com/golang/protobuf/proto/"*.go 2>/dev/null; then
  echo "vendor-debian.sh: github.com/golang/protobuf is older than 1.4; install golang-github-golang-protobuf-1-5-dev" >&2
  exit 1
fi
ours=github.com/omni-grpc/omni-grpc/generated/go
# The versions Debian 12 ships, required explicitly as -mod=vendor wants, and
# the replace spelled as vendor/modules.txt spells it.
go mod edit -require=$ours@v0.0.0 -replace=$ours="$module" \
  -require=google.golang.org/grpc@v1.33.3 -require=google.golang.org/protobuf@v1.28.1
rm -rf vendor
for p in google.golang.org/grpc google.golang.org/protobuf google.golang.org/genproto \
  github.com/golang/protobuf golang.org/x/net golang.org/x/sys golang.org/x/text; do
  mkdir -p "vendor/$(dirname "$p")"
  ln -sfn "$gocode/$p" "vendor/$p"
done
mkdir -p vendor/github.com/omni-grpc/omni-grpc/generated
ln -sfn "$module" vendor/github.com/omni-grpc/omni-grpc/generated/go
cat > vendor/modules.txt <<TXT
# github.com/omni-grpc/omni-grpc/generated/go v0.0.0 => $module
## explicit
github.com/omni-grpc/omni-grpc/generated/go/omni/v1
# google.golang.org/grpc v1.33.3
## explicit
# google.golang.org/protobuf v1.28.1
## explicit
# google.golang.org/genproto v0.0.0
# github.com/golang/protobuf v1.5.2
# golang.org/x/net v0.7.0
# golang.org/x/sys v0.5.0
# golang.org/x/text v0.7.0
# github.com/omni-grpc/omni-grpc/generated/go => $module
TXT
echo "vendor-debian.sh: vendor/ ready; build with GOFLAGS=-mod=vendor GOPROXY=off"
