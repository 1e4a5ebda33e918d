package kpurgatory.kafka;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * What the harness schedules and watches, whatever Kafka classes an era's tasks and ops extend: their labels, and the
 * behaviour of an op ({@link Script}), which each era's op delegates to from Kafka's callbacks.
 */
public final class Operations {
    private Operations() {
    }

    /** A task, op or key as the protocol names it. */
    public interface Labelled {
        String label();
    }

    /** A timer-profile task: its era's class extends Kafka's TimerTask (or an op, where TimerTask is a trait). */
    public interface Scheduled extends Labelled {
        long scheduledDelayMs();

        /** Kafka's TimerTask.cancel. */
        void cancel();
    }

    /** A purgatory-profile op: the methods are Kafka's own DelayedOperation methods. */
    public interface Delayed extends Labelled {
        Script script();

        boolean forceComplete();

        boolean tryComplete();

        boolean isCompleted();

        void cancel();

        @Override
        default String label() {
            return script().id;
        }
    }

    /**
     * An op's behaviour. Its condition is what the last set_ready said or, before any, whether its {@code readyOn}-th
     * tryComplete has been made. tryComplete follows Kafka's contract (return forceComplete() when the condition
     * holds, false otherwise), and counts its calls without a lock because Kafka calls it both under the op's lock
     * and, for a direct try, without. Between deciding and acting it yields the processor once, where a broker's
     * tryComplete does its work (reading offsets, building a response): Kafka's calls here take microseconds, less
     * than waking a thread takes, so without it the calls of one round of the concurrent check would rarely run at
     * the same time on a machine with few cores.
     */
    public static final class Script {
        final String id;
        final long delayMs;
        final Long readyOn;
        /** The last set_ready's value; null before any. */
        volatile Boolean ready;
        private final AtomicInteger tries = new AtomicInteger();

        Script(String id, long delayMs, Long readyOn) {
            this.id = id;
            this.delayMs = delayMs;
            this.readyOn = readyOn;
        }

        public long delayMs() {
            return delayMs;
        }

        /** The op's tryComplete. */
        public boolean tryComplete(Delayed op) {
            int calls = tries.incrementAndGet();
            if (op.isCompleted() && "check".equals(Call.current().route)) Call.record("stale_try", "op", id);
            Boolean set = ready;
            boolean holds = set != null ? set : readyOn != null && calls >= readyOn;
            Call.current().triedOnce();
            Thread.yield();
            return holds && op.forceComplete();
        }

        /** The op's run (the timer expiring it): Kafka's run, with completions made meanwhile routed as expiry. */
        public void run(Runnable kafkasRun) {
            Call call = Call.current();
            String outer = call.route;
            call.route = "expire";
            try {
                kafkasRun.run();
            } finally {
                call.route = outer;
            }
        }

        public void onComplete() {
            Call.recordCompletion(id);
        }

        public void onExpiration() {
            Call.record("expire", "op", id);
        }
    }

    /** Running a timer-profile task. */
    public static void ran(Scheduled task) {
        Call.record("run", "task", task.label());
    }

    /** A watch key, for the eras whose keys may be any object; it hashes as its label, as hello declares. */
    record Key(String label) implements Labelled {
        @Override
        public int hashCode() {
            return label.hashCode();
        }
    }
}
