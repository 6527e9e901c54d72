#!/usr/bin/env bash
# Compiles the generated stubs and the example with javac against Debian's
# jars (libgrpc-java, libprotobuf-java, libnetty-java, ...): no Maven needed.
# Usage: examples/java/build.sh OUT_DIR
# Writes OUT_DIR/classes and OUT_DIR/classpath; run with
#   java -cp "$(cat OUT_DIR/classpath)" io.omnigrpc.examples.OmniClient ...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
jars=/usr/share/java
cp=""
# geronimo-annotation provides @javax.annotation.Generated, which grpc-java
# 1.41 always emits and JDK 17 no longer has.
for j in grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub \
  protobuf protobuf-util guava perfmark-api gson netty-buffer netty-codec netty-codec-http \
  netty-codec-http2 netty-common netty-handler netty-resolver netty-transport geronimo-annotation-1.3-spec; do
  if [ ! -f "$jars/$j.jar" ]; then
    echo "build.sh: $jars/$j.jar is missing; run scripts/setup (as root) to install the Java packages" >&2
    exit 1
  fi
  cp="$cp:$jars/$j.jar"
done
rm -rf "$out/classes"
find "$here/../../generated/java" "$here/src" -name '*.java' > "$out/sources.txt"
javac -nowarn -encoding UTF-8 -d "$out/classes" -cp "${cp#:}" @"$out/sources.txt"
echo "$out/classes$cp" > "$out/classpath"
