#!/usr/bin/env bash
# Builds vendor/ for an offline build against Debian's Go packages: each
# dependency is a symlink into /usr/share/gocode (golang-google-grpc-dev,
# golang-google-protobuf-dev, golang-github-golang-protobuf-1-5-dev, ...), and
# the generated stubs are linked from ../../generated/go. vendor/ is
# gitignored. Then: GOFLAGS=-mod=vendor GOPROXY=off go build ./...
# (Plain replace directives cannot do this: grpc's own go.mod requires
# modules Debian does not ship, and GOPROXY=off cannot resolve them.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gocode=${GOCODE:-/usr/share/gocode/src}
if [ ! -d "$gocode/google.golang.org/grpc" ]; then
  echo "vendor.sh: $gocode/google.golang.org/grpc is missing; install golang-google-grpc-dev" >&2
  exit 1
fi
if ! grep -q 'ProtoReflect' "$gocode/github.com/golang/protobuf/proto/"*.go 2>/dev/null; then
  # grpc-go 1.33 marshals through github.com/golang/protobuf; the 1.3 API
  # builds fine and then panics on the first APIv2 message.
  echo "vendor.sh: github.com/golang/protobuf is older than 1.4; install golang-github-golang-protobuf-1-5-dev" >&2
  exit 1
fi
rm -rf "$here/vendor"
mkdir -p "$here/vendor/github.com/omni-grpc/omni-grpc/generated"
for p in google.golang.org/grpc google.golang.org/protobuf google.golang.org/genproto \
  github.com/golang/protobuf golang.org/x/net golang.org/x/sys golang.org/x/text; do
  mkdir -p "$here/vendor/$(dirname "$p")"
  ln -sfn "$gocode/$p" "$here/vendor/$p"
done
ln -sfn "$(cd "$here/../../generated/go" && pwd)" "$here/vendor/github.com/omni-grpc/omni-grpc/generated/go"
# Versions are what Debian 12 ships; `go build -mod=vendor` checks the two
# explicit requirements against go.mod.
cat > "$here/vendor/modules.txt" <<'TXT'
# github.com/omni-grpc/omni-grpc/generated/go v0.0.0 => ../../generated/go
## explicit
# google.golang.org/grpc v1.33.3
## explicit
# google.golang.org/protobuf v1.28.1
## explicit
# google.golang.org/genproto v0.0.0
# github.com/golang/protobuf v1.5.2
# golang.org/x/net v0.7.0
# golang.org/x/sys v0.5.0
# golang.org/x/text v0.7.0
# github.com/omni-grpc/omni-grpc/generated/go => ../../generated/go
TXT
