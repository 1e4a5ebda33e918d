package kpurgatory.kafka;

import kpurgatory.kafka.Operations.Delayed;
import kpurgatory.kafka.Operations.Script;

import kafka.server.DelayedOperation;
import kafka.server.DelayedOperationPurgatory;
import kafka.utils.ShutdownableThread;

import java.util.List;

/**
 * The Scala purgatory of 0.9.0, the first release with the hierarchical timing wheel. Its constructor builds its own
 * timer (a {@code kafka.utils.timer.Timer}, a class then, on the wall clock) and starts its reaper thread, whose loop
 * body advances that timer and then runs the purge check; it has no cancelForKey. So the adapter rewires each
 * purgatory once it is built: it stops the reaper, puts kpurgatory's virtual-clock timer in the timer's field, and for
 * an advance calls the reaper's loop body ({@code doWork}) itself. The tries, the watch lists, the purge check and the
 * purge, watched and delayed are 0.9's own code; so are the wheel, its buckets and its entries.
 */
final class KafkaEra implements Era {
    @Override
    public Class<?> purgatoryClass() {
        return DelayedOperationPurgatory.class;
    }

    /** The purgatory profile needs the reaper (to stop it and call its loop body) and the timer field. */
    @Override
    public boolean canAdvancePurgatory() {
        return Internals.hasFields(DelayedOperationPurgatory.class, "expirationReaper", "timeoutTimer");
    }

    @Override
    public boolean hasCancelForKey() {
        return false;
    }

    @Override
    public Clock timer(long tickMs, int wheelSize, long startMs) {
        return Timers.create(tickMs, wheelSize, startMs);
    }

    @Override
    public Purgatory purgatory(Clock timer, int purgeInterval) {
        DelayedOperationPurgatory<DelayedOperation> kafka =
            new DelayedOperationPurgatory<>("kpurgatory", 0, purgeInterval);
        ShutdownableThread reaper = (ShutdownableThread) Internals.field(kafka, "expirationReaper");
        // Before the reaper reads the timer field again. It is not interruptible, so its own shutdown would wait out
        // its 200 ms poll of the wall-clock timer: the interrupt ends that poll, and a reaper no longer running
        // leaves on the exception without logging it.
        reaper.initiateShutdown();
        reaper.interrupt();
        reaper.awaitShutdown();
        Internals.setField(kafka, "timeoutTimer", ((VirtualTimer) timer).asKafkaTimer());
        return new Purgatory() {
            @Override
            public boolean tryCompleteElseWatch(Delayed op, List<Object> keys) {
                return kafka.tryCompleteElseWatch((DelayedOperation) op, scalaList(keys));
            }

            @Override
            public int checkAndComplete(Object key) {
                return kafka.checkAndComplete(key);
            }

            @Override
            public List<Delayed> cancelForKey(Object key) {
                throw new UnsupportedOperationException("0.9 has no cancelForKey");
            }

            @Override
            public int watched() {
                return kafka.watched();
            }

            @Override
            public int delayed() {
                return kafka.delayed();
            }

            /** The reaper's loop body, on the adapter's thread: advance the timer, then the purge check. */
            @Override
            public void advanceClock() {
                reaper.doWork();
            }

            /** Stops the reaper (already stopped) and the executor the purgatory built for its own timer. */
            @Override
            public void shutdown() {
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
        return new DeadlineOps.Task(id, delayMs);
    }

    @Override
    public Delayed op(Script script, Clock timer) {
        return new DeadlineOps.Op(script, timer.nowMs());
    }

    @Override
    public Object key(String label) {
        return new Operations.Key(label);
    }

    /** Kafka's keys as a scala.collection.immutable.List, a Seq. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static scala.collection.immutable.List<Object> scalaList(List<Object> keys) {
        scala.collection.immutable.List list = scala.collection.immutable.Nil$.MODULE$;
        for (int i = keys.size() - 1; i >= 0; i--) list = list.$colon$colon(keys.get(i));
        return list;
    }
}
