package kpurgatory.kafka;

import kafka.utils.timer.VirtualWheel;

/** 0.9's timer (kafka.utils.timer, where Timer is still a class): kpurgatory's VirtualTimer on its wheel. */
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
