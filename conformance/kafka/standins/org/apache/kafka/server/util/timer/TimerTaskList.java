package org.apache.kafka.server.util.timer;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.concurrent.Delayed;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * Stand-in for Kafka's {@code TimerTaskList} (kpurgatory's own code): one bucket of a wheel, its entries in insertion
 * order, its expiration (-1 while unused), ordered in a delay queue by that expiration. All buckets of a timer share
 * one counter of the entries they hold.
 */
class TimerTaskList implements Delayed {
    private final AtomicInteger taskCounter;
    private final AtomicLong expiration = new AtomicLong(-1L);
    private final LinkedHashSet<TimerTaskEntry> entries = new LinkedHashSet<>();

    TimerTaskList(AtomicInteger taskCounter) {
        this.taskCounter = taskCounter;
    }

    /** True when the expiration changed: only then must the bucket be queued again. */
    public boolean setExpiration(long expirationMs) {
        return expiration.getAndSet(expirationMs) != expirationMs;
    }

    public long getExpiration() {
        return expiration.get();
    }

    public synchronized void foreach(Consumer<TimerTask> action) {
        for (TimerTaskEntry entry : new ArrayList<>(entries))
            if (!entry.cancelled()) action.accept(entry.timerTask);
    }

    public void add(TimerTaskEntry entry) {
        while (true) {
            entry.remove();  // outside this bucket's monitor: the entry's old bucket is locked on its own
            synchronized (this) {
                synchronized (entry) {
                    if (entry.list == null) {
                        entries.add(entry);
                        entry.list = this;
                        taskCounter.incrementAndGet();
                        return;
                    }
                }
            }
        }
    }

    public synchronized void remove(TimerTaskEntry entry) {
        synchronized (entry) {
            if (entry.list != this) return;
            entries.remove(entry);
            entry.list = null;
            taskCounter.decrementAndGet();
        }
    }

    /**
     * Empties the bucket, handing each entry to {@code reinsert} in order, and marks the bucket unused. It takes the
     * first entry until none is left, so an entry re-inserted into this very bucket (past the model's domain, where a
     * wrapped window puts it back here) is taken again, without end, as in Kafka.
     */
    public synchronized void flush(Consumer<TimerTaskEntry> reinsert) {
        while (!entries.isEmpty()) {
            TimerTaskEntry entry = entries.iterator().next();
            remove(entry);
            reinsert.accept(entry);
        }
        expiration.set(-1L);
    }

    @Override
    public long getDelay(TimeUnit unit) {
        long nowMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime());
        return unit.convert(Math.max(getExpiration() - nowMs, 0), TimeUnit.MILLISECONDS);
    }

    @Override
    public int compareTo(Delayed other) {
        return Long.compare(getExpiration(), ((TimerTaskList) other).getExpiration());
    }
}
