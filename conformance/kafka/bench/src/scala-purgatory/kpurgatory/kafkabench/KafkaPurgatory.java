package kpurgatory.kafkabench;

import java.lang.invoke.MethodHandle;
import java.util.List;
import java.util.concurrent.locks.Lock;
import kafka.server.DelayedOperation;
import kafka.server.DelayedOperationPurgatory;
import org.apache.kafka.server.util.timer.VirtualTimer;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Kafka's Scala purgatory on the Java timer (3.6 to 3.9: kafka.server in the broker's jar, Scala 2.13) as
 * {@link PurgatoryPlan} calls it, and what its ops and keys extend: keys are any objects, and an op's keys a Scala
 * sequence. The Java era's file has the same members on org.apache.kafka.server.purgatory's classes.
 */
final class KafkaPurgatory {
    private static final MethodHandle REAPER_STEP = Plan.privateMethod(DelayedOperationPurgatory.class, "advanceClock");

    private final DelayedOperationPurgatory<PurgatoryPlan.Op> purgatory;

    KafkaPurgatory(VirtualTimer timer, int purgeInterval) {
        purgatory = new DelayedOperationPurgatory<>("kpurgatory-bench", timer, 0, purgeInterval, false, true);
    }

    /** An op's keys as tryCompleteElseWatch takes them (an immutable Scala list), built before the clock starts. */
    static Object watchKeys(PurgatoryPlan.Key[] keys) {
        return CollectionConverters.asScala(List.<Object>of((Object[]) keys)).toList();
    }

    @SuppressWarnings("unchecked")
    void tryCompleteElseWatch(PurgatoryPlan.Op op, Object keys) {
        purgatory.tryCompleteElseWatch(op, (Seq<Object>) keys);
    }

    void checkAndComplete(PurgatoryPlan.Key key) {
        purgatory.checkAndComplete(key);
    }

    /** The reaper's loop body: the timer's advance, then the purge check. */
    void advanceClock() throws Throwable {
        REAPER_STEP.invokeExact((DelayedOperationPurgatory) purgatory, 0L);
    }

    int numDelayed() {
        return purgatory.numDelayed();
    }

    int watched() {
        return purgatory.watched();
    }

    void shutdown() {
        purgatory.shutdown();
    }

    /** Kafka's DelayedOperation on its own lock, Kafka's default. */
    abstract static class Operation extends DelayedOperation {
        Operation(long delayMs) {
            super(delayMs, Option.<Lock>empty());
        }
    }

    /** Nothing: the purgatory's keys are any objects. */
    interface WatchKey {
    }
}
