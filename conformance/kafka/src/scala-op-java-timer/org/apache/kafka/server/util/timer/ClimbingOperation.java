package org.apache.kafka.server.util.timer;

import kafka.server.DelayedOperation;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;

/**
 * The Scala DelayedOperation on the Java timer (3.6 to 3.9), counting the levels TimingWheel.add visits (it asks the
 * entry's task for its entry on each), so that an add that climbs overflow wheels without end is stopped. In Kafka's
 * package because getTimerTaskEntry is package-private there.
 */
public abstract class ClimbingOperation extends DelayedOperation {
    private static final MethodHandle KAFKAS = VirtualTimer.entryGetter(MethodHandles.lookup());

    protected ClimbingOperation(long delayMs) {
        super(delayMs, scala.Option.empty());
    }

    @Override
    TimerTaskEntry getTimerTaskEntry() {
        return VirtualTimer.visited(KAFKAS, this);
    }
}
