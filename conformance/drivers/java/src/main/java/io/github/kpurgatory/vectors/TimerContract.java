package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * The contract level of the timer profile (model/contract.py), judged from the vectors' {@code expect} aids: each
 * pending task has the firing window of its last add, under the binding's declared firing semantics.
 */
final class TimerContract {
    private final String firing;
    private final boolean lazySize;
    private final long maxDeadline;
    private final String beyondMax;
    private final String negativeDelays;
    private final Map<String, long[]> pending = new LinkedHashMap<>();
    /** Entries that left the timer since the last advance: what a lazy size may still count. */
    private final List<String> departed = new ArrayList<>();
    private long now;
    private boolean judging = true;

    TimerContract(ObjectNode declarations, Params params) {
        firing = declarations.path("firing").asText("kafka");
        lazySize = declarations.path("lazy_size").asBoolean(false);
        maxDeadline = declarations.path("max_deadline_ms").asLong(Long.MAX_VALUE);
        beyondMax = declarations.path("beyond_max_deadline").asText("rejected");
        negativeDelays = declarations.path("negative_delays").asText("run_at_once");
        now = params.startMs();
    }

    boolean judging() {
        return judging;
    }

    /** The violation this step shows, or null. */
    String observe(JsonNode step, Observed got) {
        JsonNode args = step.get("args");
        String cmd = step.get("cmd").textValue();
        if (got.error() != null && !cmd.equals("timer_add")) {
            return "error " + got.error() + " from " + cmd;
        }
        switch (cmd) {
            case "timer_add" -> {
                String task = args.get("task").textValue();
                String problem = add(task, args.get("delay_ms").longValue(), step.get("expect"), got);
                if (problem != null || !judging) {
                    return problem;
                }
            }
            case "timer_cancel" -> leave(args.get("task").textValue());
            case "advance" -> now = args.get("to_ms").longValue();
            default -> {}
        }
        String problem = runs(got);
        if (problem != null) {
            return problem;
        }
        return switch (cmd) {
            case "advance" -> {
                departed.clear();
                Set<String> late = new TreeSet<>();
                pending.forEach((task, window) -> { if (window[1] <= now) late.add(task); });
                yield late.isEmpty() ? null : "on_time: still pending after advance to " + now + ", past their "
                        + "firing window (" + firing + "): " + String.join(", ", late);
            }
            case "size" -> {
                long size = got.result().asLong(-1);
                long most = pending.size() + (lazySize ? departed.size() : 0);
                yield got.result().isIntegralNumber() && pending.size() <= size && size <= most ? null
                        : "counters: size " + got.result() + ", expected " + (most == pending.size()
                        ? String.valueOf(most) : "between " + pending.size() + " and " + most + " (lazy_size)");
            }
            case "shutdown" -> {
                Set<String> reported = new HashSet<>();
                got.result().forEach(id -> reported.add(id.textValue()));
                Set<String> allowed = new HashSet<>(pending.keySet());
                if (lazySize) {
                    allowed.addAll(departed);
                }
                yield reported.size() == got.result().size() && reported.containsAll(pending.keySet())
                        && allowed.containsAll(reported) ? null
                        : "counters: shutdown returned " + got.result() + ", pending: "
                        + new TreeSet<>(pending.keySet());
            }
            default -> null;
        };
    }

    /** The domain property, then the new window; null when fine. */
    private String add(String task, long delay, JsonNode expect, Observed got) {
        JsonNode deadline = expect.get("deadline_ms");
        String treatment = deadline.isNull() || deadline.longValue() > maxDeadline ? beyondMax
                : delay < 0 && !negativeDelays.equals("run_at_once") ? negativeDelays : "accepted";
        boolean rejected = "delay_out_of_range".equals(got.error());
        if (treatment.equals("undefined")) {
            judging = false;
            return null;
        }
        if (treatment.equals("rejected") != rejected) {
            return "domain: timer_add with delay_ms=" + delay + " at " + now + (rejected
                    ? " was rejected, but its deadline is inside the declared domain"
                    : " is outside the declared domain and must be rejected with delay_out_of_range");
        }
        if (rejected) {
            return got.events().isEmpty() ? null : "domain: a rejected timer_add caused events";
        }
        leave(task);
        JsonNode window = expect.get("windows").get(firing);
        pending.put(task, new long[] {window.get(0).longValue(), window.get(1).longValue()});
        return null;
    }

    private void leave(String task) {
        if (pending.remove(task) != null) {
            departed.add(task);
        }
    }

    /** Every task run must be pending and its window open: never early, never twice, never after a cancel. */
    private String runs(Observed got) {
        for (JsonNode event : got.events()) {
            String task = event.path("task").asText();
            long[] window = pending.get(task);
            if (!event.path("event").asText().equals("run") || window == null) {
                return "exactly_once: " + event + " but " + task + " was not pending";
            }
            if (now < window[0]) {
                return "on_time: " + task + " ran at " + now + ", before its window opens at " + window[0];
            }
            leave(task);
        }
        return null;
    }
}
