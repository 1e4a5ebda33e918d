package org.apache.kafka.server.util.timer;

/**
 * Stand-in for Kafka's {@code TimerTask} (kpurgatory's own code): a runnable with a fixed delay that knows the one
 * timer entry currently holding it. A new entry replaces the old one (re-adding moves the task); cancelling unlinks
 * the current entry.
 */
public abstract class TimerTask implements Runnable {
    public final long delayMs;
    /** Written under this task's monitor, read without it (bucket walks hold a bucket's monitor meanwhile). */
    private volatile TimerTaskEntry entry;

    public TimerTask(long delayMs) {
        this.delayMs = delayMs;
    }

    public void cancel() {
        synchronized (this) {
            if (entry != null) entry.remove();
            entry = null;
        }
    }

    public boolean isCancelled() {
        return entry == null;
    }

    final void setTimerTaskEntry(TimerTaskEntry replacement) {
        synchronized (this) {
            if (entry != null && entry != replacement) entry.remove();
            entry = replacement;
        }
    }

    TimerTaskEntry getTimerTaskEntry() {
        return entry;
    }
}
