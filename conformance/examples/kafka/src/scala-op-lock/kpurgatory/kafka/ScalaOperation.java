package kpurgatory.kafka;

import kafka.server.DelayedOperation;

/**
 * Kafka's DelayedOperation as built from 0.11.0.2 on, where its constructor takes an optional lock: None, so that
 * each op gets a lock of its own. run.sh compiles this file or scala-op-no-lock's, whichever the release's
 * constructor takes.
 */
abstract class ScalaOperation extends DelayedOperation {
    ScalaOperation(long delayMs) {
        super(delayMs, scala.Option.empty());
    }
}
