package org.apache.kafka.server.purgatory;

import org.apache.kafka.server.util.timer.Timer;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Stand-in for Kafka's {@code DelayedOperationPurgatory} (kpurgatory's own code), written from the purgatory's
 * documented behaviour (kpurgatory's model/purgatory.py states it rule by rule), so that the adapter's tests exercise
 * the same API, locks and counters: watch lists per key in lock-protected shards, an estimate of watched operations
 * that a purge resets, and the reaper's loop body as a private {@code advanceClock}. The field names the adapter reads
 * by reflection are Kafka's. It has no expiration reaper thread and no metrics.
 */
public class DelayedOperationPurgatory<T extends DelayedOperation> {
    private static final int SHARDS = 16;

    private final List<WatcherList> watcherLists = new ArrayList<>();
    private final AtomicInteger estimatedTotalOperations = new AtomicInteger();
    private final Timer timeoutTimer;
    private final int purgeInterval;
    private final boolean timerEnabled;

    public DelayedOperationPurgatory(String purgatoryName, Timer timeoutTimer, int brokerId, int purgeInterval,
                                     boolean reaperEnabled, boolean timerEnabled) {
        if (reaperEnabled) throw new UnsupportedOperationException("the stand-in purgatory has no reaper thread");
        this.timeoutTimer = timeoutTimer;
        this.purgeInterval = purgeInterval;
        this.timerEnabled = timerEnabled;
        for (int shard = 0; shard < SHARDS; shard++) watcherLists.add(new WatcherList());
    }

    /**
     * Completes the operation if it can; otherwise watches it under every key (until it completes), counts it once in
     * the estimate, tries again, and if that fails too hands it to the timer. True only if this call completed it.
     */
    public <K extends DelayedOperationKey> boolean tryCompleteElseWatch(T operation, List<K> watchKeys) {
        if (watchKeys.isEmpty()) throw new IllegalArgumentException("an operation must be watched under a key");
        boolean completedHere = operation.safeTryCompleteOrElse(() -> {
            for (K key : watchKeys)
                if (!operation.isCompleted()) shard(key).watch(key, operation);
            estimatedTotalOperations.incrementAndGet();
        });
        if (completedHere) return true;
        if (!operation.isCompleted() && timerEnabled) {
            timeoutTimer.add(operation);
            if (operation.isCompleted()) operation.cancel();  // completed meanwhile: take it back out of the timer
        }
        return false;
    }

    /** Tries every operation watched under the key; returns how many this call completed. */
    public <K extends DelayedOperationKey> int checkAndComplete(K key) {
        Watchers watchers = shard(key).find(key);
        return watchers == null ? 0 : watchers.tryCompleteWatched();
    }

    public int watched() {
        int entries = 0;
        for (WatcherList shard : watcherLists)
            for (Watchers watchers : shard.watchersByKey.values()) entries += watchers.operations.size();
        return entries;
    }

    public int numDelayed() {
        return timeoutTimer.size();
    }

    /** Drops the key's whole list, cancelling each entry's timer task; the operations are not completed. */
    public List<T> cancelForKey(DelayedOperationKey key) {
        WatcherList shard = shard(key);
        shard.watchersLock.lock();
        try {
            Watchers watchers = shard.watchersByKey.remove(key);
            List<T> cancelled = new ArrayList<>();
            if (watchers == null) return cancelled;
            for (T operation; (operation = watchers.operations.poll()) != null; ) {
                operation.cancel();
                cancelled.add(operation);
            }
            return cancelled;
        } finally {
            shard.watchersLock.unlock();
        }
    }

    public void shutdown() throws Exception {
        timeoutTimer.close();
    }

    /** The reaper's work: let the timer expire what is due, then purge completed entries if enough have piled up. */
    private void advanceClock(long timeoutMs) throws InterruptedException {
        timeoutTimer.advanceClock(timeoutMs);
        if (estimatedTotalOperations.get() - numDelayed() <= purgeInterval) return;
        estimatedTotalOperations.set(numDelayed());
        for (WatcherList shard : watcherLists)
            for (Watchers watchers : shard.watchersByKey.values()) watchers.purgeCompleted();
    }

    private WatcherList shard(DelayedOperationKey key) {
        return watcherLists.get(Math.abs(key.hashCode() % SHARDS));
    }

    /** One shard: its keys' watch lists, and the lock held to find, create or remove one. */
    private final class WatcherList {
        private final ConcurrentHashMap<DelayedOperationKey, Watchers> watchersByKey = new ConcurrentHashMap<>();
        private final ReentrantLock watchersLock = new ReentrantLock();

        Watchers find(DelayedOperationKey key) {
            watchersLock.lock();
            try {
                return watchersByKey.get(key);
            } finally {
                watchersLock.unlock();
            }
        }

        void watch(DelayedOperationKey key, T operation) {
            watchersLock.lock();
            try {
                watchersByKey.computeIfAbsent(key, Watchers::new).operations.add(operation);
            } finally {
                watchersLock.unlock();
            }
        }

        /** Removes the key only if it still maps to this very list and the list is still empty. */
        void removeIfEmpty(DelayedOperationKey key, Watchers watchers) {
            watchersLock.lock();
            try {
                if (watchersByKey.get(key) == watchers && watchers.operations.isEmpty()) watchersByKey.remove(key);
            } finally {
                watchersLock.unlock();
            }
        }
    }

    /** The operations watched under one key, in insertion order. */
    private final class Watchers {
        private final DelayedOperationKey key;
        private final ConcurrentLinkedQueue<T> operations = new ConcurrentLinkedQueue<>();

        Watchers(DelayedOperationKey key) {
            this.key = key;
        }

        int tryCompleteWatched() {
            int completed = 0;
            for (Iterator<T> it = operations.iterator(); it.hasNext(); ) {
                T operation = it.next();
                if (operation.isCompleted()) {
                    it.remove();
                } else if (operation.safeTryComplete()) {
                    it.remove();
                    completed++;
                }
            }
            if (operations.isEmpty()) shard(key).removeIfEmpty(key, this);
            return completed;
        }

        void purgeCompleted() {
            operations.removeIf(DelayedOperation::isCompleted);
            if (operations.isEmpty()) shard(key).removeIfEmpty(key, this);
        }
    }
}
