package kpurgatory.kafka;

import java.util.function.BooleanSupplier;

/**
 * A call the adapter stopped because it would not end: answered {@code hung} (specs/protocol.md §3.3, "Hangs,
 * answered"), with what it saw, so that the harness need not wait out its timeout and restart the JVM. Kafka's timer
 * misbehaves this way only past the model's domain, where a level's interval wraps: an add climbs overflow wheels
 * without end, or an advance re-inserts an entry into the bucket it is flushing, forever. Each timer era's
 * VirtualTimer counts both in its own code and throws this past a bound no legitimate call reaches. What Kafka throws
 * itself (a division by zero, a negative bucket index) is Kafka's behaviour, not a hang.
 */
public final class Hang extends RuntimeException {
    /**
     * Levels one TimingWheel.add may visit. A deadline that fits a long needs at most 63 (each level's tick is at
     * least twice the one below); an add whose intervals wrapped either ends, within a few hundred levels or, rarely,
     * thousands, or never. Kafka's own stack decides first: the JVM's default 1 MB stack overflows at about 5,400
     * levels, answered as a hang by {@link #climb}; this bound, the harness's too (CLIMB_LIMIT in
     * conformance/check/findings.py), stops a climb on a thread given a larger stack.
     */
    static final int CLIMB_LIMIT = 16_384;
    /** Levels the calling thread's current add has visited; -1 while it is not adding. */
    private static final ThreadLocal<int[]> CLIMBED = ThreadLocal.withInitial(() -> new int[] {-1});

    private Hang(String message) {
        super(message, null, false, false);  // thrown with the stack nearly full: no trace to fill
    }

    /**
     * Runs TimingWheel.add, counting the levels it visits ({@link #visited}), past {@link #CLIMB_LIMIT} a hang; so is
     * a stack overflow inside it (a thread with a smaller stack, or deeper frames, than measured).
     */
    public static boolean climb(BooleanSupplier add) {
        int[] climbed = CLIMBED.get();
        climbed[0] = 0;
        try {
            return add.getAsBoolean();
        } catch (StackOverflowError overflow) {
            // not how many levels: that depends on the stack's size and the JIT's frames, not on the request
            throw new Hang("TimingWheel.add recursed until the stack overflowed: its overflow wheels' intervals "
                + "wrapped and do not cover the deadline within what the stack holds");
        } finally {
            climbed[0] = -1;
        }
    }

    /**
     * Kafka's timer asked one of the adapter's tasks or ops for its entry (getTimerTaskEntry, which every era's task
     * and op base class overrides to call this): TimingWheel.add does so once on each level it visits, to see
     * whether the entry was cancelled.
     */
    public static void visited() {
        int[] climbed = CLIMBED.get();
        if (climbed[0] >= 0 && ++climbed[0] > CLIMB_LIMIT)
            throw new Hang("TimingWheel.add climbed past " + CLIMB_LIMIT + " overflow wheels: their intervals "
                + "wrapped and never cover the deadline");
    }

    /**
     * Watches one advance's bucket releases and re-insertions. An entry that a flush re-inserts into the very bucket it
     * is flushing is taken again, and placed there again (nothing the placement reads changes meanwhile), without end:
     * a hang at once. Any other endless advance is stopped by a count. In a legitimate advance a released bucket's
     * entries are each run or re-inserted into a strictly finer level (the level's clock moved to the bucket's
     * expiration, so what is left of the entry's delay is less than that level's tick), and at most 63 levels fit a
     * long: each pending entry is re-inserted at most 62 times, and each release is of a bucket queued before the
     * advance or by one of those re-insertions. So releases plus re-insertions stay below 128 per pending entry and
     * queued bucket; the floor of 10,000 (the harness's RELEASE_LIMIT) leaves room for wrapped wheels Kafka still
     * gets through.
     */
    public static final class Advance {
        private final long toMs;
        private final long limit;
        private long released;
        private long reinserted;
        private long bucketMs;

        public Advance(long toMs, int pending, int queued) {
            this.toMs = toMs;
            limit = 10_000 + 128L * (pending + queued);
        }

        /** A bucket left the delay queue. */
        public void released(long expirationMs) {
            released++;
            bucketMs = expirationMs;
            check();
        }

        /** The released bucket's flush placed an entry again: back into that bucket, or elsewhere. */
        public void reinserted(boolean intoTheBucket) {
            reinserted++;
            if (intoTheBucket)
                throw new Hang("the advance to " + toMs + " flushes the bucket expiring at " + bucketMs + " and "
                    + "re-inserts an entry into it again: the flush takes it back, without end");
            check();
        }

        private void check() {
            if (released + reinserted > limit)
                throw new Hang("the advance to " + toMs + " released " + released + " buckets and re-inserted "
                    + reinserted + " entries, past its bound of " + limit + " (the last bucket released expires at "
                    + bucketMs + "): the delay queue releases buckets again, without end");
        }
    }
}
