package kpurgatory.kafkabench;

import java.util.function.IntSupplier;
import org.apache.kafka.server.util.timer.VirtualTimer;

/**
 * One replay of a plan on a fresh timer or purgatory, built before the clock starts. Its timer is the adapter's
 * VirtualTimer over Kafka's TimingWheel. Within ms {@code t} it does what the Python replays do, in their order: what
 * leaves at {@code t} (the cancels, or the readies and their checkAndComplete), the arrivals of {@code t}, then the
 * advance to {@code t + 1}.
 */
abstract class Replay {
    /** Called once per virtual ms, after its advance, by the untimed passes. */
    interface Probe {
        /** Just before the first ms, once the timer or purgatory and the replay's own arrays exist. */
        default void start() {
        }

        void after(int t, int pending, IntSupplier watched);
    }

    final VirtualTimer timer;
    private final Plan plan;

    Replay(Plan plan) {
        this.plan = plan;
        timer = new VirtualTimer(plan.tickMs, plan.wheelSize, 0);
    }

    /** Replays ms 0 to {@code lastMs} (or the plan's end, if sooner); {@code probe} is null when timed. */
    final void play(int lastMs, Probe probe) throws Throwable {
        if (probe != null) probe.start();
        int stop = Math.min(plan.endMs - 1, lastMs), arrivalMs = plan.arrivalMs, perMs = plan.perMs;
        for (int t = 0; t <= stop; t++) {
            leave(t);
            if (t < arrivalMs) for (int index = t * perMs, end = index + perMs; index < end; index++) arrive(index);
            timer.setNow(t + 1);
            advance(t + 1);
            if (probe != null) probe.after(t, pending(), this::watched);
        }
    }

    /** What leaves at ms {@code t}. */
    abstract void leave(int t);

    /** The plan's {@code index}-th arrival. */
    abstract void arrive(int index);

    /** Releases what is due at {@code toMs}, the timer's now. */
    abstract void advance(int toMs) throws Throwable;

    /** Pending tasks, or delayed ops. */
    abstract int pending();

    int watched() {
        return 0;
    }

    /** What the bench checks the replay by, as JSON members. */
    abstract String counts();

    void close() throws Exception {
        timer.close();
    }
}
