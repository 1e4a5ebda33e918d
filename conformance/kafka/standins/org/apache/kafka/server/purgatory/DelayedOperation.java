package org.apache.kafka.server.purgatory;

import org.apache.kafka.server.util.timer.TimerTask;

import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Stand-in for Kafka's {@code DelayedOperation} (kpurgatory's own code). Whoever wins the completed flag cancels the
 * timer entry and runs onComplete, exactly once; the timer's run is an expiry (onExpiration after a won completion).
 * The purgatory calls tryComplete under the op's lock: once, or twice around watching it; and a check skips an op
 * that is already completed.
 */
public abstract class DelayedOperation extends TimerTask {
    private final AtomicBoolean completed = new AtomicBoolean(false);
    protected final Lock lock;

    public DelayedOperation(long delayMs) {
        this(delayMs, new ReentrantLock());
    }

    public DelayedOperation(long delayMs, Lock lock) {
        super(delayMs);
        this.lock = lock;
    }

    public boolean forceComplete() {
        if (!completed.compareAndSet(false, true)) return false;
        cancel();
        onComplete();
        return true;
    }

    public boolean isCompleted() {
        return completed.get();
    }

    public abstract void onExpiration();

    public abstract void onComplete();

    public abstract boolean tryComplete();

    /** One try; if it fails, {@code beforeSecondTry} (watching the op), then a second try; all under the op's lock. */
    boolean safeTryCompleteOrElse(Runnable beforeSecondTry) {
        lock.lock();
        try {
            if (tryComplete()) return true;
            beforeSecondTry.run();
            return tryComplete();
        } finally {
            lock.unlock();
        }
    }

    boolean safeTryComplete() {
        lock.lock();
        try {
            return !isCompleted() && tryComplete();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public void run() {
        if (forceComplete()) onExpiration();
    }
}
