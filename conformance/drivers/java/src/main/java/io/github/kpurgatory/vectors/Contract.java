package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The contract level (specs/vectors.md §5.2 and §5.3, model/contract.py), judged from the cases' {@code expect} aids:
 * what is pending in the timer (tasks, or ops) with the firing window of its last scheduling under the binding's
 * declared firing; for the purgatory also each op's condition and completion, and each key's watch entries. A
 * violation is reported as {@code property: what happened}.
 */
final class Contract {
    /** The commands each completion route may come from. */
    private static final Map<String, Set<String>> ROUTES = Map.of("try", Set.of("watch", "try"),
            "check", Set.of("check"), "force", Set.of("force"), "expire", Set.of("advance", "watch"));

    private final boolean timer;
    private final String firing;
    private final boolean lazySize;
    private final long maxDeadline;
    private final String beyondMax;
    private final String negativeDelays;
    private final boolean runsDueOnUpdate;
    /** Task or op -> [lo, hi] of its entry in the timer. */
    private final Map<String, Window> pending = new LinkedHashMap<>();
    /** Entries that left the timer since the last advance: what a lazy size may still count. */
    private final List<String> departed = new ArrayList<>();
    private final Map<String, Op> ops = new HashMap<>();
    /** Key -> op -> entries: of ops not completed ({@code live}), of completed ops a system may still list. */
    private final Map<String, Map<String, Integer>> live = new HashMap<>();
    private final Map<String, Map<String, Integer>> stale = new HashMap<>();
    /** Op -> route, of the completions of the step being judged. */
    private final Map<String, String> completed = new HashMap<>();
    private long now;
    private boolean judging = true;

    private static final class Op {
        final boolean readyOn;
        final long delayMs;
        Boolean ready;
        boolean done;

        Op(boolean readyOn, long delayMs) {
            this.readyOn = readyOn;
            this.delayMs = delayMs;
        }

        boolean mayHold() {
            return ready != null ? ready : readyOn;
        }
    }

    Contract(String profile, ObjectNode declarations, Params params) {
        timer = profile.equals("timer");
        firing = declarations.path("firing").asText("kafka");
        lazySize = declarations.path("lazy_size").asBoolean(false);
        maxDeadline = declarations.path("max_deadline_ms").asLong(Long.MAX_VALUE);
        beyondMax = declarations.path("beyond_max_deadline").asText("rejected");
        negativeDelays = declarations.path("negative_delays").asText("run_at_once");
        runsDueOnUpdate = declarations.path("runs_due_on_update").asBoolean(false);
        now = params.startMs();
    }

    boolean judging() {
        return judging;
    }

    /** The violation this step shows, or null. */
    String observe(JsonNode step, Observed got) {
        String cmd = step.get("cmd").textValue();
        JsonNode args = step.get("args");
        JsonNode expect = step.path("expect");
        if (cmd.equals("timer_add") || cmd.equals("watch")) {
            return schedule(cmd, args, expect, got);
        }
        if (got.error() != null) {
            return "domain: error " + got.error() + " from " + cmd;
        }
        String due = null;
        switch (cmd) {
            case "timer_cancel" -> {
                due = dueOnUpdate(args.get("task").textValue());
                leave(args.get("task").textValue());
            }
            case "cancel" -> leave(args.get("op").textValue());
            case "advance" -> now = args.get("to_ms").longValue();
            case "set_ready" -> op(args).ready = args.path("ready").asBoolean(true);
            case "cancel_key" -> {
                return cancelKey(args.get("key").textValue(), got);
            }
            case "check" -> {
                return check(args, got);
            }
            case "watched" -> {
                long entries = total(live);
                long most = entries + total(stale);
                long watched = got.result().asLong(-1);
                if (!got.result().isIntegralNumber() || watched < entries || watched > most) {
                    return "watcher_cleanup: watched() = " + got.result() + "; expected between " + entries
                            + " live entries and " + most + " (with completed entries not yet due for removal)";
                }
            }
            case "watcher_keys" -> {
                Set<String> listed = new TreeSet<>();
                got.result().forEach(key -> listed.add(key.asText()));
                Set<String> keys = keys(live);
                Set<String> most = new TreeSet<>(keys);
                most.addAll(keys(stale));
                if (!listed.containsAll(keys) || !most.containsAll(listed)) {
                    return "watcher_cleanup: watcher_keys() = " + listed + "; expected the keys " + keys
                            + ", plus possibly those of " + most;
                }
            }
            default -> {}
        }
        boolean wasDone = cmd.equals("force") || cmd.equals("try") ? op(args).done : false;
        boolean mustComplete = cmd.equals("try") && Boolean.TRUE.equals(op(args).ready) && !wasDone;
        String problem = events(cmd, args, got, due);
        if (problem != null) {
            return problem;
        }
        return switch (cmd) {
            case "force" -> result(cmd, got, !wasDone);
            case "try" -> {
                boolean here = completed.containsKey(args.get("op").textValue());
                yield mustComplete && !here ? "no_lost_wakeup: try(" + args.get("op") + ") did not complete it "
                        + "although its condition holds" : result(cmd, got, here);
            }
            case "advance" -> {
                departed.clear();
                Set<String> late = new TreeSet<>();
                pending.forEach((id, window) -> { if (window.lateAt(now)) late.add(id); });
                yield late.isEmpty() ? null : "on_time: still pending after advance to " + now + ", past their "
                        + "firing window (" + firing + "): " + String.join(", ", late);
            }
            case "size", "delayed" -> {
                long size = got.result().asLong(-1);
                long most = pending.size() + (lazySize ? departed.size() : 0);
                yield got.result().isIntegralNumber() && pending.size() <= size && size <= most ? null
                        : "counters: " + cmd + " " + got.result() + ", expected " + (most == pending.size()
                        ? String.valueOf(most) : "between " + pending.size() + " and " + most + " (lazy_size)");
            }
            case "shutdown" -> {
                Set<String> reported = new TreeSet<>();
                got.result().forEach(id -> reported.add(id.textValue()));
                Set<String> allowed = new TreeSet<>(pending.keySet());
                if (lazySize) {
                    allowed.addAll(departed);
                }
                yield got.result().isArray() && reported.size() == got.result().size()
                        && reported.containsAll(pending.keySet()) && allowed.containsAll(reported) ? null
                        : "counters: shutdown returned " + got.result() + ", pending: "
                        + new TreeSet<>(pending.keySet());
            }
            default -> null;
        };
    }

    /** A timer_add or a watch: the domain of its deadline, then its entry, events and result. */
    private String schedule(String cmd, JsonNode args, JsonNode expect, Observed got) {
        boolean watch = cmd.equals("watch");
        String id = args.get(watch ? "op" : "task").textValue();
        Op op = watch ? ops.computeIfAbsent(id, k -> new Op(args.hasNonNull("ready_on"),
                args.path("delay_ms").asLong(0))) : null;
        if (watch && args.get("keys").isEmpty()) {
            return "empty_keys".equals(got.error()) && got.events().isEmpty() ? null
                    : "domain: a watch with no keys answered " + got.toJson() + ", not the error empty_keys";
        }
        long delay = watch ? op.delayMs : args.get("delay_ms").longValue();
        JsonNode deadline = expect.get("deadline_ms");
        String treatment = deadline.isNull() || deadline.longValue() > maxDeadline ? beyondMax
                : delay < 0 && !negativeDelays.equals("run_at_once") ? negativeDelays : "accepted";
        boolean rejected = "delay_out_of_range".equals(got.error());
        if (treatment.equals("undefined")) {
            judging = false;
            return null;
        }
        if (treatment.equals("rejected") != rejected) {
            return "domain: " + cmd + " with delay_ms=" + delay + " at " + now + (rejected
                    ? " was rejected, but its deadline is inside the declared domain"
                    : " is outside the declared domain and must be rejected with delay_out_of_range");
        }
        if (rejected) {
            return got.events().isEmpty() ? null : "domain: a rejected " + cmd + " caused events";
        }
        if (got.error() != null) {
            return (watch ? "justified" : "domain") + ": error " + got.error() + " from an accepted " + cmd;
        }
        String due = watch ? null : dueOnUpdate(id);
        if (watch && op.done) {
            if (expect.path("relist_completed").asBoolean(false)) {
                args.get("keys").forEach(key -> add(stale, key.textValue(), id, 1));
            }
        } else {
            if (watch) {
                args.get("keys").forEach(key -> add(live, key.textValue(), id, 1));
            }
            leave(id);
            JsonNode window = expect.get("windows").get(firing);
            JsonNode hi = window.get(1);
            pending.put(id, new Window(window.get(0).longValue(), hi.isNull() ? null : hi.longValue()));
        }
        String problem = events(cmd, args, got, due);
        return problem != null || !watch ? problem : result(cmd, got, "try".equals(completed.get(id)));
    }

    private String check(JsonNode args, Observed got) {
        String key = args.get("key").textValue();
        Map<String, Integer> listed = new TreeMap<>(live.getOrDefault(key, Map.of()));
        String problem = events("check", args, got, null);
        if (problem != null) {
            return problem;
        }
        Map<String, Integer> kept = new HashMap<>();
        long viaCheck = 0;
        for (Map.Entry<String, Integer> entry : listed.entrySet()) {
            boolean here = "check".equals(completed.get(entry.getKey()));
            if (!here && Boolean.TRUE.equals(ops.get(entry.getKey()).ready)) {
                return "no_lost_wakeup: check(\"" + key + "\") did not complete \"" + entry.getKey() + "\", whose "
                        + "condition holds and which is watched on that key";
            }
            if (here && entry.getValue() > 1) {
                kept.put(entry.getKey(), entry.getValue() - 1);  // the walk removed the entries it visited
            }
        }
        for (String via : completed.values()) {
            viaCheck += via.equals("check") ? 1 : 0;
        }
        stale.remove(key);
        if (!kept.isEmpty()) {
            stale.put(key, kept);
        }
        return got.result().isIntegralNumber() && got.result().longValue() == viaCheck ? null
                : "justified: check returned " + got.result() + "; the observations imply " + viaCheck;
    }

    private String cancelKey(String key, Observed got) {
        Map<String, Integer> mine = live.getOrDefault(key, Map.of());
        Map<String, Integer> also = stale.getOrDefault(key, Map.of());
        Map<String, Integer> returned = new TreeMap<>();
        got.result().forEach(id -> returned.merge(id.asText(), 1, Integer::sum));
        boolean fits = got.result().isArray() && mine.entrySet().stream()
                .allMatch(e -> returned.getOrDefault(e.getKey(), 0) >= e.getValue())
                && returned.entrySet().stream().allMatch(e -> e.getValue()
                <= mine.getOrDefault(e.getKey(), 0) + also.getOrDefault(e.getKey(), 0));
        if (!fits) {
            return "watcher_cleanup: cancel_key(\"" + key + "\") returned " + got.result() + "; the key's entries are "
                    + new TreeMap<>(mine) + " plus possibly " + new TreeMap<>(also) + " completed ones";
        }
        live.remove(key);
        stale.remove(key);
        mine.keySet().forEach(this::leave);
        return events("cancel_key", null, got, null);
    }

    /**
     * The step's events, in order: runs of pending tasks whose window opened, or the purgatory's completions. With
     * runs_due_on_update, {@code due} is the task whose old, due entry may run inside this call.
     */
    private String events(String cmd, JsonNode args, Observed got, String due) {
        completed.clear();
        JsonNode previous = null;
        for (JsonNode event : got.events()) {
            String kind = event.path("event").asText();
            String problem = timer != kind.equals("run") ? (timer ? "justified: " : "exactly_once: ") + event
                    + " is not a " + (timer ? "timer" : "purgatory") + " event" : switch (kind) {
                        case "run" -> run(event.path("task").asText(), due);
                        case "complete" -> complete(cmd, args, event.path("op").asText(), event.path("via").asText());
                        case "expire" -> previous != null && previous.path("event").asText().equals("complete")
                                && previous.path("via").asText().equals("expire")
                                && previous.path("op").equals(event.path("op")) ? null
                                : "exactly_once: onExpiration of " + event.path("op") + " not right after its "
                                + "completion by expiry";
                        case "purge" -> {
                            stale.clear();
                            yield cmd.equals("advance") ? null
                                    : "purge_rule: a purge during " + cmd + "; purges run only during an advance";
                        }
                        case "stale_try" -> "justified: " + cmd + " called tryComplete on " + event.path("op")
                                + ", already completed (KAFKA-17848)";
                        default -> "exactly_once: " + event + " is not a purgatory event";
                    };
            if (problem != null) {
                return problem;
            }
            if (kind.equals("run") && due != null && due.equals(event.path("task").asText())) {
                due = null;  // the old entry's one run
            }
            previous = event;
        }
        return null;
    }

    private String run(String task, String due) {
        if (task.equals(due)) {
            return null;  // the old entry, due, run by the update (runs_due_on_update); the new one stays pending
        }
        Window window = pending.get(task);
        if (window == null) {
            return "exactly_once: task " + task + " ran but was not pending";
        }
        if (now < window.lo()) {
            return "on_time: " + task + " ran at " + now + ", before its window opens at " + window.lo();
        }
        leave(task);
        return null;
    }

    private String complete(String cmd, JsonNode args, String id, String via) {
        Op op = ops.get(id);
        if (op == null) {
            return "justified: completion of \"" + id + "\", which was never watched";
        }
        if (op.done) {
            return "exactly_once: \"" + id + "\" completed a second time (via " + via + ")";
        }
        if ((via.equals("try") || via.equals("check")) && !op.mayHold()) {
            return "justified: \"" + id + "\" completed via " + via + " but its condition "
                    + (Boolean.FALSE.equals(op.ready) ? "had been cleared" : "never held");
        }
        if (!ROUTES.getOrDefault(via, Set.of()).contains(cmd) || args != null && args.has("op")
                && !args.get("op").textValue().equals(id)) {
            return "justified: \"" + id + "\" completed via " + via + " during " + cmd;
        }
        if (via.equals("check") && live.getOrDefault(args.get("key").textValue(), Map.of()).getOrDefault(id, 0) == 0) {
            return "justified: \"" + id + "\" completed via check of " + args.get("key") + ", not a key it is "
                    + "watched on";
        }
        Window window = pending.get(id);
        leave(id);
        if (via.equals("expire")) {
            if (window == null) {
                return "justified: \"" + id + "\" expired but was not in the timer";
            }
            if (now < window.lo()) {
                return "on_time: \"" + id + "\" expired at " + now + ", before its window opens at " + window.lo();
            }
        }
        op.done = true;
        completed.put(id, via);
        live.forEach((key, entries) -> {
            Integer n = entries.remove(id);
            if (n != null) {
                add(stale, key, id, n);
            }
        });
        return null;
    }

    /** A watch, try or force must return whether it completed the op: what the events say. */
    private static String result(String cmd, Observed got, boolean expected) {
        return got.result().isBoolean() && got.result().booleanValue() == expected ? null
                : "justified: " + cmd + " returned " + got.result() + "; the observations imply " + expected;
    }

    /** With runs_due_on_update, the task whose entry is pending and due, which the update may run. */
    private String dueOnUpdate(String task) {
        Window window = pending.get(task);
        return runsDueOnUpdate && window != null && window.lo() <= now ? task : null;
    }

    /**
     * A firing window [lo, hi]; {@code hi} null when the case writes null, the window's end lying past 2^63-1
     * (specs/vectors.md §2): no advance reaches it, so the entry is never late. It is not clamped to
     * Long.MAX_VALUE, as an entry whose hi is exactly 2^63-1 is late after an advance to 2^63-1.
     */
    private record Window(long lo, Long hi) {
        boolean lateAt(long now) {
            return hi != null && hi <= now;
        }
    }

    private Op op(JsonNode args) {
        return ops.computeIfAbsent(args.get("op").textValue(), k -> new Op(false, 0));
    }

    private void leave(String id) {
        if (pending.remove(id) != null) {
            departed.add(id);
        }
    }

    private static void add(Map<String, Map<String, Integer>> entries, String key, String id, int n) {
        entries.computeIfAbsent(key, k -> new TreeMap<>()).merge(id, n, Integer::sum);
    }

    /** The keys with entries. */
    private static Set<String> keys(Map<String, Map<String, Integer>> entries) {
        Set<String> keys = new TreeSet<>();
        entries.forEach((key, ops) -> { if (!ops.isEmpty()) keys.add(key); });
        return keys;
    }

    private static long total(Map<String, Map<String, Integer>> entries) {
        return entries.values().stream().flatMap(m -> m.values().stream()).mapToLong(Integer::longValue).sum();
    }
}
