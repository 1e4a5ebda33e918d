package kpurgatory.kafka;

import kpurgatory.kafka.Operations.Delayed;
import kpurgatory.kafka.Operations.Script;

import org.apache.kafka.server.purgatory.DelayedOperationKey;
import org.apache.kafka.server.purgatory.DelayedOperationPurgatory;
import org.apache.kafka.server.util.timer.Climbing;
import org.apache.kafka.server.util.timer.Timer;

import java.util.ArrayList;
import java.util.List;

/** The Java purgatory's era (org.apache.kafka.server.purgatory, from 4.0), on the Java timer. */
final class KafkaEra implements Era {
    @Override
    public Class<?> purgatoryClass() {
        return DelayedOperationPurgatory.class;
    }

    /** The reaper's loop body is the purgatory's private advanceClock. */
    @Override
    public boolean canAdvancePurgatory() {
        try {
            DelayedOperationPurgatory.class.getDeclaredMethod("advanceClock", long.class);
            return true;
        } catch (NoSuchMethodException e) {
            return false;
        }
    }

    @Override
    public boolean hasCancelForKey() {
        return true;
    }

    @Override
    public Clock timer(long tickMs, int wheelSize, long startMs) {
        return Timers.create(tickMs, wheelSize, startMs);
    }

    @Override
    public Purgatory purgatory(Clock timer, int purgeInterval) {
        DelayedOperationPurgatory<Op> kafka =
            new DelayedOperationPurgatory<>("kpurgatory", (Timer) timer, 0, purgeInterval, false, true);
        return new Purgatory() {
            @Override
            public boolean tryCompleteElseWatch(Delayed op, List<Object> keys) {
                List<DelayedOperationKey> watchKeys = new ArrayList<>();
                for (Object key : keys) watchKeys.add((DelayedOperationKey) key);
                return kafka.tryCompleteElseWatch((Op) op, watchKeys);
            }

            @Override
            public int checkAndComplete(Object key) {
                return kafka.checkAndComplete((DelayedOperationKey) key);
            }

            @Override
            public List<Delayed> cancelForKey(Object key) {
                return new ArrayList<>(kafka.cancelForKey((DelayedOperationKey) key));
            }

            @Override
            public int watched() {
                return kafka.watched();
            }

            @Override
            public int delayed() {
                return kafka.numDelayed();
            }

            @Override
            public void advanceClock() throws Exception {
                Internals.call(kafka, "advanceClock", new Class<?>[] {long.class}, 0L);
            }

            @Override
            public void shutdown() throws Exception {
                kafka.shutdown();
            }

            @Override
            public Object kafka() {
                return kafka;
            }
        };
    }

    @Override
    public Operations.Scheduled task(String id, long delayMs) {
        return new Task(id, delayMs);
    }

    @Override
    public Delayed op(Script script, Clock timer) {
        return new Op(script);
    }

    @Override
    public Object key(String label) {
        return new Key(label);
    }

    private static final class Task extends Climbing.Task implements Operations.Scheduled {
        private final String id;

        Task(String id, long delayMs) {
            super(delayMs);
            this.id = id;
        }

        @Override
        public String label() {
            return id;
        }

        @Override
        public long scheduledDelayMs() {
            return delayMs;
        }

        @Override
        public void run() {
            Operations.ran(this);
        }
    }

    private static final class Op extends Climbing.Operation implements Delayed {
        private final Script script;

        Op(Script script) {
            super(script.delayMs());
            this.script = script;
        }

        @Override
        public Script script() {
            return script;
        }

        @Override
        public boolean tryComplete() {
            return script.tryComplete(this);
        }

        @Override
        public void run() {
            script.run(super::run);
        }

        @Override
        public void onComplete() {
            script.onComplete();
        }

        @Override
        public void onExpiration() {
            script.onExpiration();
        }
    }

    /** A watch key; it hashes as its label, as hello declares. */
    private record Key(String label) implements DelayedOperationKey, Operations.Labelled {
        @Override
        public String keyLabel() {
            return label;
        }

        @Override
        public int hashCode() {
            return label.hashCode();
        }
    }
}
