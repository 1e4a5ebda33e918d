package kpurgatory.kafka;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The command a thread is executing: the events it caused, in order, and the route ({@code via}) a completion made
 * now would take. Per thread, because under the concurrent feature several commands run at once and
 * {@code onComplete} runs in the thread whose {@code forceComplete} won, so its event belongs to that thread's command.
 * Expired tasks run in the thread whose add or advance made them due, in that command.
 */
final class Call {
    private static final ThreadLocal<Call> CURRENT = new ThreadLocal<>();

    final List<Object> events = new ArrayList<>();
    String route = "try";
    /** The gate this command stops at, on its {@code gateTry}-th tryComplete; null if none. */
    private final Gate gate;
    private final long gateTry;
    private long tries;

    private Call(Gate gate, long gateTry) {
        this.gate = gate;
        this.gateTry = gateTry;
    }

    static Call begin(Gate gate, long gateTry) {
        Call call = new Call(gate, gateTry);
        CURRENT.set(call);
        return call;
    }

    /** A tryComplete of this command evaluated its op's condition: the gated one waits for its gate here. */
    void triedOnce() {
        if (++tries == gateTry && gate != null) gate.waitUntilOpen();
    }

    static Call current() {
        return CURRENT.get();
    }

    static void record(String event, String field, Object value) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("event", event);
        fields.put(field, value);
        current().events.add(fields);
    }

    static void recordCompletion(String op) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("event", "complete");
        fields.put("op", op);
        fields.put("via", current().route);
        current().events.add(fields);
    }
}
