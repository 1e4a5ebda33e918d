package org.apache.kafka.server.util.timer;

import kpurgatory.kafka.Hang;

import org.apache.kafka.server.purgatory.DelayedOperation;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;

/**
 * The bases of the java-purgatory era's timer tasks and ops: Kafka's TimingWheel.add asks an entry's task for its
 * entry once on each level it visits, and these count that ({@link Hang#visited}), so that an add that climbs
 * overflow wheels without end is stopped. In Kafka's package because getTimerTaskEntry is package-private there.
 */
public final class Climbing {
    private Climbing() {
    }

    public abstract static class Task extends TimerTask {
        protected Task(long delayMs) {
            super(delayMs);
        }

        @Override
        TimerTaskEntry getTimerTaskEntry() {
            Hang.visited();
            return super.getTimerTaskEntry();
        }
    }

    public abstract static class Operation extends DelayedOperation {
        private static final MethodHandle KAFKAS = VirtualTimer.entryGetter(MethodHandles.lookup());

        protected Operation(long delayMs) {
            super(delayMs);
        }

        @Override
        TimerTaskEntry getTimerTaskEntry() {
            return VirtualTimer.visited(KAFKAS, this);
        }
    }
}
