package kpurgatory.kafkabench;

import java.lang.invoke.MethodHandle;
import java.util.List;
import org.apache.kafka.server.purgatory.DelayedOperation;
import org.apache.kafka.server.purgatory.DelayedOperationKey;
import org.apache.kafka.server.purgatory.DelayedOperationPurgatory;
import org.apache.kafka.server.util.timer.VirtualTimer;

/**
 * Kafka's Java purgatory (4.0 on: org.apache.kafka.server.purgatory) as {@link PurgatoryPlan} calls it, and what its
 * ops and keys extend. The Scala era's file has the same members on kafka.server's classes: the two purgatories share
 * no type to call them through, and the timed replay calls Kafka directly, not through a method handle.
 */
final class KafkaPurgatory {
    private static final MethodHandle REAPER_STEP = Plan.privateMethod(DelayedOperationPurgatory.class, "advanceClock");

    private final DelayedOperationPurgatory<PurgatoryPlan.Op> purgatory;

    KafkaPurgatory(VirtualTimer timer, int purgeInterval) {
        purgatory = new DelayedOperationPurgatory<>("kpurgatory-bench", timer, 0, purgeInterval, false, true);
    }

    /** An op's keys as tryCompleteElseWatch takes them, built before the clock starts. */
    static Object watchKeys(PurgatoryPlan.Key[] keys) {
        return List.of(keys);
    }

    @SuppressWarnings("unchecked")
    void tryCompleteElseWatch(PurgatoryPlan.Op op, Object keys) {
        purgatory.tryCompleteElseWatch(op, (List<PurgatoryPlan.Key>) keys);
    }

    void checkAndComplete(PurgatoryPlan.Key key) {
        purgatory.checkAndComplete(key);
    }

    /** The reaper's loop body (private): the timer's advance, then the purge check. */
    void advanceClock() throws Throwable {
        REAPER_STEP.invokeExact((DelayedOperationPurgatory) purgatory, 0L);
    }

    int numDelayed() {
        return purgatory.numDelayed();
    }

    int watched() {
        return purgatory.watched();
    }

    void shutdown() throws Exception {
        purgatory.shutdown();
    }

    /** Kafka's DelayedOperation on its own lock, Kafka's default. */
    abstract static class Operation extends DelayedOperation {
        Operation(long delayMs) {
            super(delayMs);
        }
    }

    /** What the purgatory's keys are. */
    interface WatchKey extends DelayedOperationKey {
    }
}
