package kpurgatory.kafka;

import kafka.server.DelayedOperation;
import kafka.utils.timer.TimerTaskEntry;

/**
 * Kafka's DelayedOperation as built before 0.11.0.2, where its constructor takes only the delay (the op's monitor is
 * its lock). run.sh compiles this file, scala-op-lock's or scala-op-java-timer's, whichever the release's classes take.
 */
abstract class ScalaOperation extends DelayedOperation {
    ScalaOperation(long delayMs) {
        super(delayMs);
    }

    /** TimingWheel.add asks for it once on each level it visits: counted, to stop an endless climb ({@link Hang}). */
    @Override
    public TimerTaskEntry getTimerTaskEntry() {
        Hang.visited();
        return super.getTimerTaskEntry();
    }
}
