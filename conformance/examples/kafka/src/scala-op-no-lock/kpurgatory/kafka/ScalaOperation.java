package kpurgatory.kafka;

import kafka.server.DelayedOperation;

/**
 * Kafka's DelayedOperation as built before 0.11.0.2, where its constructor takes only the delay (the op's monitor is
 * its lock). run.sh compiles this file or scala-op-lock's, whichever the release's constructor takes.
 */
abstract class ScalaOperation extends DelayedOperation {
    ScalaOperation(long delayMs) {
        super(delayMs);
    }
}
