package kpurgatory.kafka;

import org.apache.kafka.server.util.timer.ClimbingOperation;

/**
 * Kafka's DelayedOperation on the Java timer (3.6 to 3.9): its constructor takes an optional lock (None: each op gets
 * a lock of its own), and its base, {@link ClimbingOperation}, counts the levels an add visits. run.sh compiles this
 * file, scala-op-lock's or scala-op-no-lock's, whichever the release's classes take.
 */
abstract class ScalaOperation extends ClimbingOperation {
    ScalaOperation(long delayMs) {
        super(delayMs);
    }
}
