package org.apache.kafka.server.util.timer;

import java.util.concurrent.DelayQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Stand-in for Kafka's {@code TimingWheel} (kpurgatory's own code), with the same arithmetic, so that the adapter's
 * tests compare something wheel-shaped: {@code wheelSize} buckets of {@code tickMs} each cover {@code interval};
 * an entry due within the current tick is refused (the caller runs it), one due within the interval goes into the
 * bucket of its tick (queued when that bucket's expiration changes), anything later into a coarser wheel created on
 * first use, whose tick is this wheel's interval. The field names are Kafka's, for the adapter's wheel read-out.
 */
public class TimingWheel {
    private final long tickMs;
    private final int wheelSize;
    private final long interval;
    private final AtomicInteger taskCounter;
    private final DelayQueue<TimerTaskList> queue;
    private final TimerTaskList[] buckets;
    private long currentTimeMs;
    private volatile TimingWheel overflowWheel;

    TimingWheel(long tickMs, int wheelSize, long startMs, AtomicInteger taskCounter, DelayQueue<TimerTaskList> queue) {
        this.tickMs = tickMs;
        this.wheelSize = wheelSize;
        this.interval = tickMs * wheelSize;
        this.taskCounter = taskCounter;
        this.queue = queue;
        this.currentTimeMs = startMs - startMs % tickMs;
        buckets = new TimerTaskList[wheelSize];
        for (int slot = 0; slot < wheelSize; slot++) buckets[slot] = new TimerTaskList(taskCounter);
    }

    /** False when the entry was cancelled or is already due (within the current tick); true when placed. */
    public boolean add(TimerTaskEntry entry) {
        long expiration = entry.expirationMs;
        if (entry.cancelled() || expiration < currentTimeMs + tickMs) return false;
        if (expiration >= currentTimeMs + interval) return coarser().add(entry);
        long tick = expiration / tickMs;
        TimerTaskList bucket = buckets[(int) (tick % wheelSize)];
        bucket.add(entry);
        if (bucket.setExpiration(tick * tickMs)) queue.offer(bucket);
        return true;
    }

    /** Moves to the tick holding {@code timeMs} if that is a later tick; the coarser wheels follow. */
    public void advanceClock(long timeMs) {
        if (timeMs < currentTimeMs + tickMs) return;
        currentTimeMs = timeMs - timeMs % tickMs;
        TimingWheel coarser = overflowWheel;
        if (coarser != null) coarser.advanceClock(currentTimeMs);
    }

    private synchronized TimingWheel coarser() {
        if (overflowWheel == null)
            overflowWheel = new TimingWheel(interval, wheelSize, currentTimeMs, taskCounter, queue);
        return overflowWheel;
    }
}
