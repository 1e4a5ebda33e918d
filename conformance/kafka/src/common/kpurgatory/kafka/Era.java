package kpurgatory.kafka;

import java.util.List;

/**
 * One API era of Kafka's purgatory and timer: the only code that names Kafka's classes. Each era's sources define
 * {@code KafkaEra} (the purgatory and its ops) and {@code Timers} (the timer); run.sh compiles common code with one
 * purgatory era and one timer era, so the era-neutral code ({@link KafkaSystem}, the protocol) is written once.
 */
public interface Era {
    /** Kafka's purgatory class, whose jar the hello names. */
    Class<?> purgatoryClass();

    /** Whether the purgatory's reaper step (advanceClock) can be called: the purgatory profile needs it. */
    boolean canAdvancePurgatory();

    /** Whether the purgatory has cancelForKey (from 0.11.0.0). */
    boolean hasCancelForKey();

    Clock timer(long tickMs, int wheelSize, long startMs);

    Purgatory purgatory(Clock timer, int purgeInterval);

    /** A task of the timer profile: running it is a {@code run} event. */
    Operations.Scheduled task(String id, long delayMs);

    /** A delayed operation of the purgatory profile, doing what its script says, built at the timer's now. */
    Operations.Delayed op(Operations.Script script, Clock timer);

    /** A watch key with this label. */
    Object key(String label);

    /** kpurgatory's timer on Kafka's TimingWheel, on a virtual clock (each timer era's VirtualTimer). */
    interface Clock {
        /** The virtual now. */
        long nowMs();

        /** Moves the virtual clock; the next {@link #advance} releases what became due. */
        void setNow(long toMs);

        /** Releases every bucket due by the virtual now and runs what became due. */
        void advance();

        int size();

        /** Whether the calling thread's purge check fired, and what the purgatory watched before its purge. */
        PurgeCheck purgeCheck();

        /** Kafka's Timer.add for a task of {@link Era#task}. */
        void schedule(Operations.Scheduled task);

        /** Whether the task (or op) has an entry in a bucket, at any level. */
        boolean isPending(Object task);

        /** The wheel, finest level first; entries are the tasks and ops of {@link Era}. */
        List<Level> levels();

        /** Expirations of the buckets in the delay queue, sorted. */
        List<Long> queuedExpirations();

        record Bucket(int slot, long expirationMs, List<Object> entries) {
        }

        record Level(long tickMs, int wheelSize, long currentMs, List<Bucket> buckets) {
        }
    }

    /** Kafka's DelayedOperationPurgatory, its calls as the protocol needs them. */
    interface Purgatory {
        /** Kafka's tryCompleteElseWatch; an empty key list throws what Kafka throws. */
        boolean tryCompleteElseWatch(Operations.Delayed op, List<Object> keys);

        int checkAndComplete(Object key);

        List<Operations.Delayed> cancelForKey(Object key);

        int watched();

        int delayed();

        /** The reaper's loop body: advance the timer (without waiting), then the purge check. */
        void advanceClock() throws Exception;

        void shutdown() throws Exception;

        /** Kafka's purgatory object, for the read-outs of its private fields. */
        Object kafka();
    }
}
