package kafka.utils.timer;

/**
 * kpurgatory's {@link Timer} (the Scala trait, 0.10.0 to 3.5) on a virtual clock: {@link VirtualWheel}, whose entries
 * take now + delay, as SystemTimer's do.
 */
public final class VirtualTimer extends VirtualWheel implements Timer {
    public VirtualTimer(long tickMs, int wheelSize, long startMs) {
        super(tickMs, wheelSize, startMs);
    }

    @Override
    protected TimerTaskEntry entry(TimerTask task, long nowMs) {
        return new TimerTaskEntry(task, task.delayMs() + nowMs);
    }

    /** No executor to stop: pending tasks are simply dropped with the timer. */
    @Override
    public void shutdown() {
    }
}
