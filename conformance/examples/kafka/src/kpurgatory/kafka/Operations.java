package kpurgatory.kafka;

import org.apache.kafka.server.purgatory.DelayedOperation;
import org.apache.kafka.server.purgatory.DelayedOperationKey;
import org.apache.kafka.server.util.timer.TimerTask;

import java.util.concurrent.atomic.AtomicInteger;

/** What the harness schedules and watches: plain timer tasks, operations whose condition it controls, and keys. */
final class Operations {
    private Operations() {
    }

    /** A task of the timer profile: running it is a {@code run} event. */
    static final class Task extends TimerTask {
        final String id;

        Task(String id, long delayMs) {
            super(delayMs);
            this.id = id;
        }

        @Override
        public void run() {
            Call.record("run", "task", id);
        }
    }

    /**
     * A delayed operation of the purgatory profile. Its condition is what the last set_ready said or, before any,
     * whether its {@code readyOn}-th tryComplete has been made. tryComplete follows Kafka's contract (return
     * forceComplete() when the condition holds, false otherwise), and counts its calls without a lock because Kafka
     * calls it both under the op's lock and, for a direct try, without. Between deciding and acting it yields the
     * processor once, where a broker's tryComplete does its work (reading offsets, building a response): Kafka's
     * calls here take microseconds, less than waking a thread takes, so without it the calls of one round of the
     * concurrent check would rarely run at the same time on a machine with few cores.
     */
    static final class Op extends DelayedOperation {
        final String id;
        final Long readyOn;
        /** The last set_ready's value; null before any. */
        volatile Boolean ready;
        private final AtomicInteger tries = new AtomicInteger();

        Op(String id, long delayMs, Long readyOn) {
            super(delayMs);
            this.id = id;
            this.readyOn = readyOn;
        }

        @Override
        public boolean tryComplete() {
            int calls = tries.incrementAndGet();
            if (isCompleted() && "check".equals(Call.current().route)) Call.record("stale_try", "op", id);
            Boolean set = ready;
            boolean holds = set != null ? set : readyOn != null && calls >= readyOn;
            Call.current().triedOnce();
            Thread.yield();
            return holds && forceComplete();
        }

        @Override
        public void run() {
            Call call = Call.current();
            String outer = call.route;
            call.route = "expire";
            try {
                super.run();
            } finally {
                call.route = outer;
            }
        }

        @Override
        public void onComplete() {
            Call.recordCompletion(id);
        }

        @Override
        public void onExpiration() {
            Call.record("expire", "op", id);
        }
    }

    record Key(String label) implements DelayedOperationKey {
        @Override
        public String keyLabel() {
            return label;
        }
    }
}
