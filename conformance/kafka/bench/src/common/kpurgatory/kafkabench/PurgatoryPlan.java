package kpurgatory.kafkabench;

import java.nio.IntBuffer;

/**
 * P1: within ms {@code t}, the ops listed for {@code t} become ready and checkAndComplete is called on the key listed
 * with each; then the arrivals of {@code t} are watched (tryCompleteElseWatch, not ready); then the reaper's loop body
 * (the purgatory's advanceClock: the timer's advance, then the purge check) runs at {@code t + 1}. Fields after
 * {@link Plan}'s: purgeInterval, delayMs, keyCount, the ops' keys (an op count, keys per op, then the key indexes), the
 * readies per ms (pairs: op index, key index).
 *
 * <p>{@link KafkaPurgatory} is the era's purgatory (src/java-purgatory or src/scala-purgatory, compiled with this
 * file).
 */
final class PurgatoryPlan extends Plan {
    // Static, as the Python ops' callbacks are their class's: an op object holds only what Kafka's holds, and `ready`.
    static long completed, expired;

    private final int purgeInterval, delayMs;
    private final Key[] keys;
    private final Object[] opKeys;  // each op's keys as the era's tryCompleteElseWatch takes them
    private final int[] readyOffsets, readies;

    PurgatoryPlan(IntBuffer in) {
        super("purgatory", in);
        purgeInterval = in.get();
        delayMs = in.get();
        keys = new Key[in.get()];
        for (int id = 0; id < keys.length; id++) keys[id] = new Key(id);
        opKeys = new Object[in.get()];
        int perOp = in.get();
        for (int op = 0; op < opKeys.length; op++) {
            Key[] watched = new Key[perOp];
            for (int i = 0; i < perOp; i++) watched[i] = keys[in.get()];
            opKeys[op] = KafkaPurgatory.watchKeys(watched);
        }
        readyOffsets = ints(in, endMs + 1);
        readies = ints(in, 2 * readyOffsets[endMs]);
    }

    @Override
    Replay replay() {
        return new PurgatoryReplay();
    }

    record Key(int id) implements KafkaPurgatory.WatchKey {
        /** The Java purgatory's keys have a label (not overriding in the Scala era, whose keys are any object). */
        public String keyLabel() {
            return "k" + id;
        }
    }

    /** Completable once its ready flag is set, like the bench's Python ops. */
    static final class Op extends KafkaPurgatory.Operation {
        boolean ready;

        Op(long delayMs) {
            super(delayMs);
        }

        @Override
        public boolean tryComplete() {
            return ready && forceComplete();
        }

        @Override
        public void onComplete() {
            completed++;
        }

        @Override
        public void onExpiration() {
            expired++;
        }
    }

    private final class PurgatoryReplay extends Replay {
        private final KafkaPurgatory purgatory;
        private final Op[] held = new Op[opKeys.length];
        private long purges;

        PurgatoryReplay() {
            super(PurgatoryPlan.this);
            purgatory = new KafkaPurgatory(timer, purgeInterval);
            completed = expired = 0;
        }

        @Override
        void leave(int t) {
            for (int i = readyOffsets[t]; i < readyOffsets[t + 1]; i++) {
                int index = readies[2 * i];
                held[index].ready = true;
                held[index] = null;
                purgatory.checkAndComplete(keys[readies[2 * i + 1]]);
            }
        }

        @Override
        void arrive(int index) {
            Op op = new Op(delayMs);
            held[index] = op;
            purgatory.tryCompleteElseWatch(op, opKeys[index]);
        }

        @Override
        void advance(int toMs) throws Throwable {
            purgatory.advanceClock();
            if (timer.purgeCheck().fired()) purges++;
        }

        @Override
        int pending() {
            return purgatory.numDelayed();
        }

        @Override
        int watched() {
            return purgatory.watched();
        }

        @Override
        String counts() {
            return "\"completed\": " + completed + ", \"expired\": " + expired + ", \"purges\": " + purges
                + ", \"pending\": " + purgatory.numDelayed();
        }

        @Override
        void close() throws Exception {
            purgatory.shutdown();
        }
    }
}
