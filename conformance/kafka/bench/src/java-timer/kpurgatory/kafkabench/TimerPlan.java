package kpurgatory.kafkabench;

import java.nio.IntBuffer;
import org.apache.kafka.server.util.timer.TimerTask;

/**
 * T1 and T2: within ms {@code t}, cancel the tasks listed for {@code t}, add the arrivals of {@code t}, advance to
 * {@code t + 1}. Fields after {@link Plan}'s: the delays (a count, then one per task in arrival order), the cancels per
 * ms (task indexes).
 */
final class TimerPlan extends Plan {
    // The counters are static, as the Python tasks' callback is their class's: a task object holds only what Kafka's
    // TimerTask holds. The driver replays one plan at a time on one thread.
    static long fired, firedAtWrongTime, nowMs;
    static boolean allAtZero;

    private final int[] delays, cancelOffsets, cancels;
    private final boolean[] kept;  // the tasks somebody cancels, so the replay holds them; the others are the timer's

    TimerPlan(IntBuffer in) {
        super("timer", in);
        delays = ints(in, in.get());
        cancelOffsets = ints(in, endMs + 1);
        cancels = ints(in, cancelOffsets[endMs]);
        kept = new boolean[delays.length];
        for (int index : cancels) kept[index] = true;
    }

    @Override
    Replay replay() {
        return new TimerReplay();
    }

    static final class Task extends TimerTask {
        Task(long delayMs) {
            super(delayMs);
        }

        @Override
        public void run() {
            fired++;
            if (allAtZero && delayMs != nowMs) firedAtWrongTime++;
        }
    }

    private final class TimerReplay extends Replay {
        private final TimerTask[] held = new TimerTask[delays.length];

        TimerReplay() {
            super(TimerPlan.this);
            fired = firedAtWrongTime = nowMs = 0;
            allAtZero = arrivalMs == 1;
        }

        @Override
        void leave(int t) {
            for (int i = cancelOffsets[t]; i < cancelOffsets[t + 1]; i++) {
                held[cancels[i]].cancel();
                held[cancels[i]] = null;
            }
        }

        @Override
        void arrive(int index) {
            Task task = new Task(delays[index]);
            timer.add(task);
            if (kept[index]) held[index] = task;
        }

        @Override
        void advance(int toMs) {
            nowMs = toMs;
            timer.advanceClock(0L);
        }

        @Override
        int pending() {
            return timer.size();
        }

        @Override
        String counts() {
            return "\"fired\": " + fired + ", \"fired_at_wrong_time\": " + firedAtWrongTime + ", \"pending\": "
                + timer.size();
        }
    }
}
