package kafka.utils.timer;

import kpurgatory.kafka.Era;
import kpurgatory.kafka.Hang;
import kpurgatory.kafka.Internals;
import kpurgatory.kafka.Operations;
import kpurgatory.kafka.PurgeCheck;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.DelayQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * kpurgatory's timer over Kafka's own Scala {@link TimingWheel} (kafka.utils.timer, 0.9.0 to 3.5), on a virtual clock:
 * the Java timer era's VirtualTimer, written against the Scala classes. It is not Kafka code; it lives in Kafka's
 * package because the timer's classes are {@code private[timer]} there (public in bytecode, but kept together). Scala
 * closures are built as {@code AbstractFunction1}, which every Scala version has. Each Scala timer era makes it the
 * {@code Timer} its purgatory takes (a trait from 0.10.0, a class in 0.9), and says how an entry gets its deadline.
 *
 * <p>It is built the way SystemTimer is: a shared task counter, a delay queue that every wheel level offers its buckets
 * to, and a read-write lock (adds share it, advancing the clock takes it alone). Two things differ, both because time
 * is virtual:
 * <ul>
 * <li>A bucket leaves the delay queue when its expiration is at or before the virtual now, not when the system clock
 * reaches it (TimerTaskList's own delay reads the system clock). The head is taken with {@code peek} and removed by
 * identity, which is the queue's own heap order, so buckets due at the same time are released in the order Kafka's
 * DelayQueue would release them. Advancing the clock never waits: everything due is released at once.</li>
 * <li>SystemTimer hands a task that is due on add, or whose bucket was released, to a single executor thread. Here the
 * calling thread runs those tasks itself, in the order they were handed over, right after it let go of the timer's
 * lock and before {@code add} or {@code advanceClock} returns. So a task runs in the command that made it due.</li>
 * </ul>
 * An add that climbs overflow wheels without end (the Scala ops' base class counts the levels it visits), or an
 * advance that never stops releasing and re-inserting, is stopped as a {@link Hang}.
 */
public abstract class VirtualWheel implements Era.Clock {
    private final DelayQueue<TimerTaskList> delayQueue = new DelayQueue<>();
    private final AtomicInteger taskCounter = new AtomicInteger();
    private final TimingWheel timingWheel;
    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private final AtomicLong nowMs;
    private final PurgeCheck purgeCheck = new PurgeCheck();
    /** Tasks this thread handed to the "executor", to run before its call returns. */
    private final ThreadLocal<ArrayDeque<TimerTask>> handedOver = ThreadLocal.withInitial(ArrayDeque::new);

    protected VirtualWheel(long tickMs, int wheelSize, long startMs) {
        timingWheel = new TimingWheel(tickMs, wheelSize, startMs, taskCounter, delayQueue);
        nowMs = new AtomicLong(startMs);
    }

    /** Whether the wheel read-out finds TimingWheel's private fields. */
    public static boolean readable() {
        return Internals.hasFields(TimingWheel.class, "tickMs", "wheelSize", "currentTime", "buckets", "overflowWheel");
    }

    /** The task's new entry, made under the timer's read lock at the virtual now. */
    protected abstract TimerTaskEntry entry(TimerTask task, long nowMs);

    @Override
    public long nowMs() {
        return nowMs.get();
    }

    @Override
    public void setNow(long toMs) {
        long before = nowMs.getAndAccumulate(toMs, Math::max);
        if (toMs < before) throw new IllegalArgumentException("advance to " + toMs + " is before now (" + before + ")");
    }

    /** Timer.add. */
    public void add(TimerTask timerTask) {
        lock.readLock().lock();
        try {
            place(entry(timerTask, nowMs.get()));
        } finally {
            lock.readLock().unlock();
        }
        runHandedOver();
    }

    @Override
    public void schedule(Operations.Scheduled task) {
        add((TimerTask) task);
    }

    @Override
    public void advance() {
        advanceClock(0L);
    }

    /**
     * Timer.advanceClock: releases every bucket due by the virtual now, earliest first; the timeout does not apply to
     * virtual time.
     */
    public boolean advanceClock(long timeoutMs) {
        boolean released = false;
        lock.writeLock().lock();
        try {
            Hang.Advance advance = new Hang.Advance(nowMs.get(), taskCounter.get(), delayQueue.size());
            for (TimerTaskList bucket = takeDue(); bucket != null; bucket = takeDue()) {
                released = true;
                advance.released(bucket.getExpiration());
                timingWheel.advanceClock(bucket.getExpiration());
                TimerTaskList flushed = bucket;
                bucket.flush(function(entry -> {
                    place(entry);
                    advance.reinserted(entry.list() == flushed);
                }));
            }
        } finally {
            lock.writeLock().unlock();
        }
        runHandedOver();
        purgeCheck.advanced();
        return released;
    }

    /** Timer.size. */
    @Override
    public int size() {
        purgeCheck.sizeRead();
        return taskCounter.get();
    }

    @Override
    public PurgeCheck purgeCheck() {
        return purgeCheck;
    }

    private void place(TimerTaskEntry entry) {
        if (!Hang.climb(() -> timingWheel.add(entry)) && !entry.cancelled()) handedOver.get().add(entry.timerTask());
    }

    private TimerTaskList takeDue() {
        TimerTaskList head = delayQueue.peek();
        if (head == null || head.getExpiration() > nowMs.get()) return null;
        delayQueue.remove(head);
        return head;
    }

    private void runHandedOver() {
        ArrayDeque<TimerTask> tasks = handedOver.get();
        for (TimerTask task = tasks.poll(); task != null; task = tasks.poll()) task.run();
    }

    private static <T> AbstractFunction1<T, BoxedUnit> function(java.util.function.Consumer<T> body) {
        return new AbstractFunction1<>() {
            @Override
            public BoxedUnit apply(T value) {
                body.accept(value);
                return BoxedUnit.UNIT;
            }
        };
    }

    // --- read-outs (under the timer's lock alone, so no add moves an entry meanwhile) ------------------------------

    /** The wheel, finest level first; TimingWheel's fields are private, so they are read by reflection. */
    @Override
    public List<Level> levels() {
        lock.writeLock().lock();
        try {
            List<Level> levels = new ArrayList<>();
            for (Object wheel = timingWheel; wheel != null; wheel = Internals.field(wheel, "overflowWheel")) {
                List<Bucket> buckets = new ArrayList<>();
                TimerTaskList[] slots = (TimerTaskList[]) Internals.field(wheel, "buckets");
                for (int slot = 0; slot < slots.length; slot++) {
                    List<Object> entries = new ArrayList<>();
                    slots[slot].foreach(function(entries::add));
                    if (!entries.isEmpty()) buckets.add(new Bucket(slot, slots[slot].getExpiration(), entries));
                }
                levels.add(new Level((Long) Internals.field(wheel, "tickMs"),
                    (Integer) Internals.field(wheel, "wheelSize"), (Long) Internals.field(wheel, "currentTime"),
                    buckets));
            }
            return levels;
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** Whether the task has an entry in a bucket, at any level (not run, cancelled or replaced). */
    @Override
    public boolean isPending(Object task) {
        TimerTaskEntry entry = ((TimerTask) task).getTimerTaskEntry();
        return entry != null && entry.list() != null;
    }

    /** Expirations of the buckets in the delay queue, sorted; a bucket queued twice counts twice. */
    @Override
    public List<Long> queuedExpirations() {
        lock.writeLock().lock();
        try {
            List<Long> expirations = new ArrayList<>();
            for (Object bucket : delayQueue.toArray()) expirations.add(((TimerTaskList) bucket).getExpiration());
            expirations.sort(null);
            return expirations;
        } finally {
            lock.writeLock().unlock();
        }
    }
}
