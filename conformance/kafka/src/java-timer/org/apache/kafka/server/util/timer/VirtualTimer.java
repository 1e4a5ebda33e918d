package org.apache.kafka.server.util.timer;

import kpurgatory.kafka.Era;
import kpurgatory.kafka.Hang;
import kpurgatory.kafka.Internals;
import kpurgatory.kafka.Operations;
import kpurgatory.kafka.PurgeCheck;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.DelayQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * kpurgatory's {@link Timer} over Kafka's own {@link TimingWheel} (the Java timer, from 3.6), on a virtual clock. It
 * is not Kafka code; it lives in Kafka's package only because TimingWheel's constructor and TimerTaskList are
 * package-private.
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
 * An add that climbs overflow wheels without end, or an advance that never stops releasing and re-inserting, is
 * stopped as a {@link Hang}: the adapter's tasks and ops count the levels an add visits ({@link #entryGetter}).
 */
public final class VirtualTimer implements Timer, Era.Clock {
    private final DelayQueue<TimerTaskList> delayQueue = new DelayQueue<>();
    private final AtomicInteger taskCounter = new AtomicInteger();
    private final TimingWheel timingWheel;
    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private final AtomicLong nowMs;
    private final PurgeCheck purgeCheck = new PurgeCheck();
    /** Tasks this thread handed to the "executor", to run before its call returns. */
    private final ThreadLocal<ArrayDeque<TimerTask>> handedOver = ThreadLocal.withInitial(ArrayDeque::new);

    public VirtualTimer(long tickMs, int wheelSize, long startMs) {
        timingWheel = new TimingWheel(tickMs, wheelSize, startMs, taskCounter, delayQueue);
        nowMs = new AtomicLong(startMs);
    }

    @Override
    public long nowMs() {
        return nowMs.get();
    }

    @Override
    public void setNow(long toMs) {
        long before = nowMs.getAndAccumulate(toMs, Math::max);
        if (toMs < before) throw new IllegalArgumentException("advance to " + toMs + " is before now (" + before + ")");
    }

    @Override
    public void add(TimerTask timerTask) {
        lock.readLock().lock();
        try {
            place(new TimerTaskEntry(timerTask, timerTask.delayMs + nowMs.get()));
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

    /** Releases every bucket due by the virtual now, earliest first; the timeout does not apply to virtual time. */
    @Override
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
                bucket.flush(entry -> {
                    place(entry);
                    advance.reinserted(entry.list == flushed);
                });
            }
        } finally {
            lock.writeLock().unlock();
        }
        runHandedOver();
        purgeCheck.advanced();
        return released;
    }

    @Override
    public int size() {
        purgeCheck.sizeRead();
        return taskCounter.get();
    }

    @Override
    public PurgeCheck purgeCheck() {
        return purgeCheck;
    }

    /** No executor to stop: pending tasks are simply dropped with the timer. */
    @Override
    public void close() {
    }

    private void place(TimerTaskEntry entry) {
        if (!Hang.climb(() -> timingWheel.add(entry)) && !entry.cancelled()) handedOver.get().add(entry.timerTask);
    }

    /**
     * Kafka's own TimerTask.getTimerTaskEntry, for an op class of this package that overrides it to count the levels
     * an add visits ({@link #visited}): javac has no {@code super} call for it there (the op's superclass, Kafka's
     * DelayedOperation, lives in another package, so it does not inherit a package-private method), so the call is
     * a method handle's, past the override.
     */
    public static MethodHandle entryGetter(MethodHandles.Lookup op) {
        try {
            return op.findSpecial(TimerTask.class, "getTimerTaskEntry", MethodType.methodType(TimerTaskEntry.class),
                op.lookupClass()).asType(MethodType.methodType(TimerTaskEntry.class, TimerTask.class));
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("this Kafka build's TimerTask has no getTimerTaskEntry()", e);
        }
    }

    /** Such an override: counts the level ({@link Hang#visited}), then answers with Kafka's getter. */
    public static TimerTaskEntry visited(MethodHandle kafkas, TimerTask op) {
        Hang.visited();
        try {
            return (TimerTaskEntry) kafkas.invokeExact(op);
        } catch (RuntimeException | Error e) {  // a stack overflow deep in a climb, above all
            throw e;
        } catch (Throwable unexpected) {  // a getter declares no checked exception
            throw new IllegalStateException(unexpected);
        }
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
                    slots[slot].foreach(entries::add);
                    if (!entries.isEmpty()) buckets.add(new Bucket(slot, slots[slot].getExpiration(), entries));
                }
                levels.add(new Level((Long) Internals.field(wheel, "tickMs"),
                    (Integer) Internals.field(wheel, "wheelSize"), (Long) Internals.field(wheel, "currentTimeMs"),
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
        return entry != null && entry.list != null;
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
