package kpurgatory.kafka;

import kafka.server.DelayedOperation;
import kafka.utils.timer.TimerTaskEntry;

/**
 * Kafka's DelayedOperation as built from 0.11.0.2 to 3.5, where its constructor takes an optional lock: None, so that
 * each op gets a lock of its own. run.sh compiles this file, scala-op-no-lock's or (on the Java timer, from 3.6)
 * scala-op-java-timer's, whichever the release's classes take.
 */
abstract class ScalaOperation extends DelayedOperation {
    ScalaOperation(long delayMs) {
        super(delayMs, scala.Option.empty());
    }

    /** TimingWheel.add asks for it once on each level it visits: counted, to stop an endless climb ({@link Hang}). */
    @Override
    public TimerTaskEntry getTimerTaskEntry() {
        Hang.visited();
        return super.getTimerTaskEntry();
    }
}
