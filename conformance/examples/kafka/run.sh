#!/usr/bin/env bash
# kpurgatory's adapter over Kafka's own purgatory and timing wheel (README.md beside this file):
#
#   conformance/examples/kafka/run.sh CLASSPATH
#
# CLASSPATH holds the Kafka build to check: its server-common classes (or jar) and their dependencies. The first run
# compiles the adapter against it into a cache directory outside the repository ($KPURGATORY_CACHE, by default
# ~/.cache/kpurgatory), keyed by the adapter's sources, the classpath and the JDK; later runs start at once.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 CLASSPATH   (Kafka's server-common classes and their dependencies, ':'-separated)" >&2
    exit 2
fi
classpath=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sources=("$here"/src/kpurgatory/kafka/*.java "$here"/src/org/apache/kafka/server/util/timer/*.java)
set -f  # classpath entries such as lib/* are for java, not for the shell
key=$({ cat "${sources[@]}"; echo "$classpath"; IFS=:; for entry in $classpath; do stat -c '%n %Y %s' "$entry" 2>/dev/null || true; done
        readlink -f "$(command -v javac)"; } | sha256sum | cut -c1-16)
set +f
cache=${KPURGATORY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kpurgatory}/kafka-adapter/$key
if [ ! -e "$cache/.compiled" ]; then
    mkdir -p "$(dirname "$cache")"
    building=$(mktemp -d "$cache.XXXXXX")
    if ! javac -nowarn -d "$building" -cp "$classpath" "${sources[@]}" >&2; then
        rm -rf "$building"
        echo "run.sh: the adapter does not compile against $classpath (is it Kafka's server-common and its dependencies?)" >&2
        exit 3
    fi
    touch "$building/.compiled"
    mv -T "$building" "$cache" 2>/dev/null || rm -rf "$building"  # a concurrent first run got there first
fi
# A hot JIT throws its preallocated exceptions without message or stack: keep Kafka's exceptions telling.
exec java -XX:+UseSerialGC -XX:-OmitStackTraceInFastThrow -cp "$cache:$classpath" kpurgatory.kafka.KafkaAdapter
