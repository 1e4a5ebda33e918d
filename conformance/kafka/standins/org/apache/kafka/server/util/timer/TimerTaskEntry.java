package org.apache.kafka.server.util.timer;

/**
 * Stand-in for Kafka's {@code TimerTaskEntry} (kpurgatory's own code): a task's place in one bucket, with the
 * deadline it was scheduled for. Creating an entry makes it the task's current one.
 */
public final class TimerTaskEntry {
    public final TimerTask timerTask;
    public final long expirationMs;
    /** The bucket holding this entry, or null; changed only under that bucket's and this entry's monitors. */
    volatile TimerTaskList list;

    public TimerTaskEntry(TimerTask timerTask, long expirationMs) {
        this.timerTask = timerTask;
        this.expirationMs = expirationMs;
        if (timerTask != null) timerTask.setTimerTaskEntry(this);
    }

    /** True once the task was cancelled or re-scheduled through another entry. */
    public boolean cancelled() {
        return timerTask.getTimerTaskEntry() != this;
    }

    /** Unlinks the entry from its bucket; retried while a concurrent move hands it from one bucket to another. */
    public void remove() {
        for (TimerTaskList bucket = list; bucket != null; bucket = list) bucket.remove(this);
    }
}
