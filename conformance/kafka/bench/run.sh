#!/usr/bin/env bash
# The JVM side of `kpurgatory bench --kafka` (README.md beside this file):
#
#   conformance/kafka/bench/run.sh --era ERA CLASSPATH
#
# ERA is the release's API era as conformance/adapters/kafka.py names it: java-purgatory (4.0 on) or
# scala-purgatory-java-timer (3.6 to 3.9); releases before 3.6 have the Scala timer, which the driver does not drive.
# CLASSPATH holds the release's classes and their dependencies. The first run compiles the driver, with the adapter's
# VirtualTimer that it runs Kafka's wheel under, against it into a cache directory outside the repository
# ($KPURGATORY_CACHE, by default ~/.cache/kpurgatory; ../compile-cache.sh), keyed by those sources, the classpath and
# the JDK; later runs start at once. Commands are read on stdin.
set -euo pipefail
usage="usage: $0 --era java-purgatory|scala-purgatory-java-timer CLASSPATH"
if [ $# -ne 3 ] || [ "$1" != --era ] || [ -z "$3" ]; then
    echo "$usage" >&2
    exit 2
fi
case $2 in
    java-purgatory) purgatory=java-purgatory ;;
    scala-purgatory-java-timer) purgatory=scala-purgatory ;;
    *) echo "run.sh: the bench driver has no sources for the era '$2' ($usage)" >&2; exit 2 ;;
esac
classpath=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
adapter=$(dirname "$here")
. "$adapter/compile-cache.sh"
sources=("$here"/src/common/kpurgatory/kafkabench/*.java "$here"/src/java-timer/kpurgatory/kafkabench/*.java
         "$here"/src/$purgatory/kpurgatory/kafkabench/*.java
         "$adapter"/src/java-timer/org/apache/kafka/server/util/timer/VirtualTimer.java)
# javac takes what VirtualTimer names (the adapter's Era, Operations...) from the adapter's common sources.
kafka_cache kafka-bench "$2" "$classpath" "$0" "${sources[@]}" "$adapter"/src/common/kpurgatory/kafka/*.java
kafka_compile "the bench driver" "$2" "$classpath" -implicit:class -sourcepath "$adapter/src/common" "${sources[@]}"
# One core's worth of JVM (JIT and GC sized to one processor, as the Python side has one), a fixed heap so the figures
# do not depend on the machine's memory, and the serial collector: its pauses are stop-the-world, so the driver can
# count them with the replaying thread's CPU time.
exec java -XX:ActiveProcessorCount=1 -XX:+UseSerialGC -Xms1g -Xmx1g -cp "$cache:$classpath" \
    kpurgatory.kafkabench.KafkaBench
