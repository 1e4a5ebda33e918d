package kpurgatory.kafka;

import kafka.utils.timer.Timer;
import kafka.utils.timer.TimerTask;
import kafka.utils.timer.TimerTaskEntry;
import kafka.utils.timer.VirtualWheel;

/**
 * kpurgatory's virtual-clock timer ({@link VirtualWheel}) over 0.9's wheel. A 0.9 entry reads its deadline from its
 * task ({@code TimerTask.expirationMs}), where later releases' entries take now + delay: an op carries the deadline it
 * was built with, and a task of the timer profile takes now + delay as it enters the timer ({@link DeadlineOps}).
 */
final class VirtualTimer extends VirtualWheel {
    private final long tickMs;
    private final int wheelSize;
    private final long startMs;

    VirtualTimer(long tickMs, int wheelSize, long startMs) {
        super(tickMs, wheelSize, startMs);
        this.tickMs = tickMs;
        this.wheelSize = wheelSize;
        this.startMs = startMs;
    }

    @Override
    protected TimerTaskEntry entry(TimerTask task, long nowMs) {
        if (task instanceof DeadlineOps.Task scheduled) scheduled.enter(nowMs);
        return new TimerTaskEntry(task);
    }

    /**
     * This timer as the {@link Timer} 0.9's purgatory holds (a class, which it builds itself): every method the
     * purgatory calls is this timer's. The wheel that Timer's constructor builds is never used, and no executor is
     * given because none is: due tasks run on the calling thread, as in every era.
     */
    Timer asKafkaTimer() {
        return new Timer(null, tickMs, wheelSize, startMs) {
            @Override
            public void add(TimerTask timerTask) {
                VirtualTimer.this.add(timerTask);
            }

            @Override
            public boolean advanceClock(long timeoutMs) {
                return VirtualTimer.this.advanceClock(timeoutMs);
            }

            @Override
            public int size() {
                return VirtualTimer.this.size();
            }
        };
    }
}
