package kpurgatory.kafka;

import org.apache.kafka.server.util.timer.TimingWheel;
import org.apache.kafka.server.util.timer.VirtualTimer;

/** The Java timer's era (org.apache.kafka.server.util.timer, from 3.6): kpurgatory's VirtualTimer on its wheel. */
final class Timers {
    private Timers() {
    }

    static Era.Clock create(long tickMs, int wheelSize, long startMs) {
        return new VirtualTimer(tickMs, wheelSize, startMs);
    }

    /** Whether the wheel read-out finds TimingWheel's private fields. */
    static boolean canReadWheel() {
        return Internals.hasFields(TimingWheel.class,
            "tickMs", "wheelSize", "currentTimeMs", "buckets", "overflowWheel");
    }
}
