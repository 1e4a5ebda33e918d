package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The timer profile in Java: implement this around your timer and turn it into a {@link Binding} with
 * {@link #binding}. Time is virtual: only {@link #advance} moves the clock, and a task that becomes due runs
 * synchronously inside the call that made it due, reported through the {@code run} callback given to init.
 */
public interface TimerUnderTest {
    /** Thrown by {@link #add} to reject a delay outside the declared domain (error {@code delay_out_of_range}). */
    final class DelayOutOfRange extends RuntimeException {
        /** The rejection; it carries no stack trace, being an answer rather than a fault. */
        public DelayOutOfRange() {
            super("delay_out_of_range", null, false, false);
        }
    }

    /** A fresh timer at {@code params.startMs()}; {@code run} is called with a task's id when it runs. */
    void init(Params params, java.util.function.Consumer<String> run);

    /** Schedules {@code task} at now + delayMs; adding a pending task again moves it (one entry per task id). */
    void add(String task, long delayMs);

    /** Removes the task's pending entry, if any. */
    void cancel(String task);

    /** Sets now to {@code toMs} and runs every task due by then. */
    void advance(long toMs);

    /** Entries pending. */
    long size();

    /** Stops the timer and returns the ids still pending (any order); only called if the binding lists it. */
    default List<String> shutdown() {
        throw new UnsupportedOperationException("shutdown");
    }

    /**
     * A binding over a TimerUnderTest. {@code rejects} says why a case's params do not fit the timer (null: they do);
     * {@code withShutdown} whether {@link #shutdown} is implemented.
     */
    static Binding binding(String name, String level, ObjectNode declarations, boolean withShutdown,
                           Function<Params, String> rejects, Supplier<TimerUnderTest> timers) {
        return new Binding() {
            private TimerUnderTest timer;
            private final List<JsonNode> events = new ArrayList<>();
            private final JsonNodeFactory json = JsonNodeFactory.instance;

            public String name() { return name; }
            public String level() { return level; }
            public ObjectNode declarations() { return declarations; }
            public Set<String> profiles() { return Set.of("timer"); }
            public String rejects(Params params) { return rejects.apply(params); }

            public Set<String> commands() {
                return withShutdown ? Set.of("timer_add", "timer_cancel", "advance", "size", "shutdown")
                        : Set.of("timer_add", "timer_cancel", "advance", "size");
            }

            public void init(String profile, Params params) {
                timer = timers.get();
                timer.init(params, task -> events.add(json.objectNode().put("event", "run").put("task", task)));
            }

            public Observed step(String cmd, JsonNode args) {
                events.clear();
                JsonNode result = json.nullNode();
                try {
                    switch (cmd) {
                        case "timer_add" -> timer.add(args.get("task").textValue(), args.get("delay_ms").longValue());
                        case "timer_cancel" -> timer.cancel(args.get("task").textValue());
                        case "advance" -> timer.advance(args.get("to_ms").longValue());
                        case "size" -> result = json.numberNode(timer.size());
                        case "shutdown" -> {
                            var ids = json.arrayNode();
                            timer.shutdown().stream().sorted().forEach(ids::add);
                            result = ids;
                        }
                        default -> { return Observed.failure("unsupported command " + cmd); }
                    }
                } catch (DelayOutOfRange rejected) {
                    return new Observed(json.nullNode(), List.copyOf(events), "delay_out_of_range", null);
                } catch (RuntimeException raised) {  // judged as a failure to answer, recorded in the observed trace
                    return Observed.failure(raised.toString());
                }
                return Observed.of(result, List.copyOf(events));
            }
        };
    }
}
