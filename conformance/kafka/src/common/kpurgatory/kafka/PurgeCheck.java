package kpurgatory.kafka;

import java.util.function.IntSupplier;

/**
 * What a timer sees of the purgatory's purge check, per thread. The check reads the timer's size once after the
 * timer advanced, and once more, when it fires, to reset the purgatory's estimate just before the purge: so a second
 * read since the last advance says that this thread's check fired, and what the purgatory watched at that read is
 * what it watched before the purge (the timer's expirations before it complete ops but leave them watched).
 * Reading the watch lists only then spares every other advance a walk over all of Kafka's watcher shards.
 */
public final class PurgeCheck {
    private final ThreadLocal<int[]> reads = ThreadLocal.withInitial(() -> new int[1]);
    private final ThreadLocal<int[]> watchedAtPurge = ThreadLocal.withInitial(() -> new int[1]);
    private volatile IntSupplier watched;

    /** The purgatory's watched count, read when a check fires. */
    public void watch(IntSupplier watched) {
        this.watched = watched;
    }

    /** The calling thread's timer advance returned. */
    public void advanced() {
        reads.get()[0] = 0;
    }

    /** The calling thread read the timer's size. */
    public void sizeRead() {
        IntSupplier watched = this.watched;
        if (++reads.get()[0] == 2 && watched != null)
            watchedAtPurge.get()[0] = watched.getAsInt();
    }

    /** Whether the calling thread's purge check fired since its last advance. */
    public boolean fired() {
        return reads.get()[0] > 1;
    }

    /** What the purgatory watched just before the calling thread's last purge. */
    public int watchedBeforePurge() {
        return watchedAtPurge.get()[0];
    }
}
