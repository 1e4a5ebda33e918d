package kpurgatory.examples.agrona;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.kpurgatory.vectors.Binding;
import io.github.kpurgatory.vectors.Params;
import io.github.kpurgatory.vectors.TimerUnderTest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.agrona.DeadlineTimerWheel;

/**
 * Agrona's {@link DeadlineTimerWheel}: a single hashed wheel on an explicit clock (every call takes {@code now}), not
 * thread-safe, no task objects. A task id maps to the timer id of its current entry; moving a task cancels that entry
 * and schedules a new one. The clock is the vectors' virtual time in milliseconds.
 */
public final class AgronaTimer implements TimerUnderTest {
    /** The most spokes allocated (Agrona allocates 16 longs per spoke up front). */
    private static final int MAX_TICKS_PER_WHEEL = 1 << 16;

    private DeadlineTimerWheel wheel;
    private Consumer<String> run;
    private long now;
    private final Map<String, Long> timerOfTask = new HashMap<>();
    private final Map<Long, String> taskOfTimer = new HashMap<>();

    /** At the contract level, under the declarations its Javadoc supports (README). */
    static Binding binding() {
        ObjectNode declarations = JsonNodeFactory.instance.objectNode()
                .put("firing", "kafka")
                // NULL_DEADLINE (Long.MAX_VALUE) marks an empty slot: no timer can have that deadline
                .put("max_deadline_ms", DeadlineTimerWheel.NULL_DEADLINE - 1)
                .put("beyond_max_deadline", "undefined");
        return TimerUnderTest.binding("agrona DeadlineTimerWheel 2.6.0", "contract", declarations, true,
                params -> null, AgronaTimer::new);
    }

    @Override
    public void init(Params params, Consumer<String> run) {
        // Agrona takes powers of two: the tick resolution is the case's tick rounded down, the spokes its wheel size
        // rounded up (at most MAX_TICKS_PER_WHEEL). Neither changes when a timer fires, since each deadline is compared
        // with now; they only set how the timers are spread over the spokes.
        int spokes = Integer.highestOneBit(Math.min(Math.max(2, params.wheelSize()), MAX_TICKS_PER_WHEEL) * 2 - 1);
        wheel = new DeadlineTimerWheel(TimeUnit.MILLISECONDS, params.startMs(), Long.highestOneBit(params.tickMs()),
                spokes);
        this.run = run;
        now = params.startMs();
    }

    @Override
    public void add(String task, long delayMs) {
        cancel(task);
        long timer = wheel.scheduleTimer(now + delayMs);  // past Long.MAX_VALUE it wraps: undefined, as declared
        timerOfTask.put(task, timer);
        taskOfTimer.put(timer, task);
    }

    @Override
    public void cancel(String task) {
        Long timer = timerOfTask.remove(task);
        if (timer != null) {
            taskOfTimer.remove(timer);
            wheel.cancelTimer(timer);
        }
    }

    /**
     * Polls until a poll of the tick holding {@code toMs} expires nothing. Empty ticks are wound over up to the
     * earliest deadline in the wheel ({@code currentTickTime(now)} expires nothing it skips), so that a jump of 2^62 ms
     * is not 2^62 polls.
     */
    @Override
    public void advance(long toMs) {
        now = toMs;
        boolean[] unknown = {false};
        while (!unknown[0]) {
            wheel.currentTickTime(Math.min(toMs, earliestDeadline()));
            long tick = wheel.currentTickTime();
            int expired = wheel.poll(toMs, (unit, at, timer) -> {
                String task = taskOfTimer.remove(timer);
                if (task == null) {  // a timer id never scheduled (or already gone): report it, and poll no more
                    unknown[0] = true;
                    task = "agrona timer id " + timer;
                }
                timerOfTask.remove(task);
                run.accept(task);
                return true;
            }, Integer.MAX_VALUE);
            if (expired == 0 && wheel.currentTickTime() == tick) {
                return;
            }
        }
    }

    private long earliestDeadline() {
        long[] earliest = {Long.MAX_VALUE};
        wheel.forEach((deadline, timer) -> earliest[0] = Math.min(earliest[0], deadline));
        return earliest[0];
    }

    @Override
    public long size() {
        return wheel.timerCount();
    }

    /** Agrona has no shutdown: the timers still in the wheel, then {@code clear()}. */
    @Override
    public List<String> shutdown() {
        List<String> pending = new ArrayList<>();
        wheel.forEach((deadline, timer) -> pending.add(taskOfTimer.get(timer)));
        wheel.clear();
        return pending;
    }
}
