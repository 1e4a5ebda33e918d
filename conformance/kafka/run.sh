#!/usr/bin/env bash
# kpurgatory's adapter over Kafka's own purgatory and timing wheel (README.md beside this file):
#
#   conformance/kafka/run.sh [--era ERA] [--kafka-version VERSION] [--compile] CLASSPATH
#
# CLASSPATH holds the Kafka build to check and its dependencies; ERA says which API era of Kafka's classes it holds:
#   java-purgatory              (default) 4.0 on: the Java purgatory and timer of kafka-server-common
#   scala-purgatory-java-timer  3.6 to 3.9: the broker's Scala purgatory on kafka-server-common's Java timer
#   scala-purgatory-scala-timer 0.10.0 to 3.5: the Scala purgatory and the Scala timer (kafka.utils.timer)
#   scala-purgatory-0.9         0.9.0: the Scala purgatory that builds its own Scala timer (rewired: README.md)
# VERSION, when given, is the release the classpath holds: the hello names it and declares it, so that the model
# follows that release's rules (`kpurgatory check --kafka VERSION` resolves a release and passes all three).
# The first run compiles the adapter (the common sources and the era's) against CLASSPATH into a cache directory
# outside the repository ($KPURGATORY_CACHE, by default ~/.cache/kpurgatory), keyed by the sources, the era, the
# classpath and the JDK; later runs start at once. With --compile it only compiles (so that no first request waits).
set -euo pipefail
usage="usage: $0 [--era java-purgatory|scala-purgatory-java-timer|scala-purgatory-scala-timer|scala-purgatory-0.9]"
usage+=" [--kafka-version VERSION] [--compile] CLASSPATH"
era=java-purgatory
version=
compile_only=
while [ $# -gt 1 ]; do
    case $1 in
        --era) era=$2; shift 2 ;;
        --kafka-version) version=$2; shift 2 ;;
        --compile) compile_only=1; shift ;;
        *) break ;;
    esac
done
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "$usage" >&2
    exit 2
fi
classpath=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/src
case $era in
    java-purgatory) parts=(common java-timer java-purgatory) ;;
    scala-purgatory-java-timer) parts=(common java-timer scala-ops scala-purgatory) ;;
    scala-purgatory-scala-timer) parts=(common scala-wheel scala-timer scala-ops scala-purgatory) ;;
    scala-purgatory-0.9) parts=(common scala-wheel scala-ops scala-purgatory-0.9) ;;
    *) echo "run.sh: unknown era '$era'"$'\n'"$usage" >&2; exit 2 ;;
esac
sources=()
# Releases whose purgatory has monitors (the op's before 0.11.0.2, the watch lists' before 0.10.1.1) get the agent
# that makes them the scheduler's points, when ASM is on the classpath (conformance/adapters/kafka.py adds it).
agent=
if [[ $era == scala-purgatory-* && ":$classpath:" =~ /asm-[0-9][0-9.]*\.jar: ]]; then
    parts+=(monitor-agent)
    agent=1
fi
for part in "${parts[@]}" scala-op-lock scala-op-no-lock scala-op-java-timer; do
    [ -d "$here/$part" ] && while IFS= read -r -d '' file; do sources+=("$file"); done \
        < <(find "$here/$part" -name '*.java' -print0 | sort -z)
done
. "$(dirname "$here")/compile-cache.sh"
kafka_cache kafka-adapter "$era" "$classpath" "$0" "${sources[@]}"
if [ ! -e "$cache/.compiled" ]; then
    compiled=()
    for file in "${sources[@]}"; do
        case $file in
            "$here"/scala-op-*) ;;
            *) compiled+=("$file") ;;
        esac
    done
    # The Scala ops' base class: DelayedOperation's constructor took an optional lock from 0.11.0.2 on, which a Java
    # subclass must name, and on the Java timer (3.6 on) the base lives partly in the timer's package.
    case $era in
        scala-purgatory-java-timer) variant=scala-op-java-timer ;;
        scala-purgatory-*)
            variant=scala-op-no-lock
            if javap -cp "$classpath" kafka.server.DelayedOperation 2>/dev/null \
                    | grep -q 'DelayedOperation(long, scala.Option'; then
                variant=scala-op-lock
            fi ;;
        *) variant= ;;
    esac
    [ -z "$variant" ] || while IFS= read -r -d '' file; do compiled+=("$file"); done \
        < <(find "$here/$variant" -name '*.java' -print0 | sort -z)
    # the agent's jar holds only its manifest: the agent's classes are on the classpath
    [ -z "$agent" ] || kafka_compiled() { printf 'Premain-Class: kpurgatory.kafka.MonitorAgent\n' > "$1/agent.mf" &&
                                          jar cfm "$1/monitor-agent.jar" "$1/agent.mf"; }
    kafka_compile "the adapter" "$era" "$classpath" "${compiled[@]}"
fi
[ -z "$compile_only" ] || exit 0
# A hot JIT throws its preallocated exceptions without message or stack: keep Kafka's exceptions telling. An adapter
# lives for one check, seconds of requests: the optimising compiler would cost it more CPU than it saves (halving the
# JVM's share of a check), so only the quick one compiles.
exec java ${agent:+"-javaagent:$cache/monitor-agent.jar"} \
    -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-OmitStackTraceInFastThrow -Dkpurgatory.kafka.version="$version" \
    -cp "$cache:$classpath" kpurgatory.kafka.KafkaAdapter
