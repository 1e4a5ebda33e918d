package kpurgatory.kafka;

import kafka.utils.timer.VirtualTimer;
import kafka.utils.timer.VirtualWheel;

/** The Scala timer's era (kafka.utils.timer, 0.10.0 to 3.5): kpurgatory's VirtualTimer on its wheel. */
final class Timers {
    private Timers() {
    }

    static Era.Clock create(long tickMs, int wheelSize, long startMs) {
        return new VirtualTimer(tickMs, wheelSize, startMs);
    }

    /** Whether the wheel read-out finds TimingWheel's private fields. */
    static boolean canReadWheel() {
        return VirtualWheel.readable();
    }
}
