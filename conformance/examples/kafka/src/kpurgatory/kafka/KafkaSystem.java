package kpurgatory.kafka;

import kpurgatory.kafka.Operations.Key;
import kpurgatory.kafka.Operations.Op;
import kpurgatory.kafka.Operations.Task;

import org.apache.kafka.server.purgatory.DelayedOperationPurgatory;
import org.apache.kafka.server.util.timer.TimerTask;
import org.apache.kafka.server.util.timer.VirtualTimer;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

/**
 * One run (from an {@code init} to the next): Kafka's DelayedOperationPurgatory, or a bare timer, on a
 * {@link VirtualTimer}, and the protocol's commands as calls into them. Thread-safe for the concurrent feature: the
 * tasks and ops are found or created in concurrent maps, and every call into Kafka takes Kafka's own locks.
 */
final class KafkaSystem {
    /** Thrown for a request the adapter cannot execute (the protocol's failure), never for Kafka's behaviour. */
    static final class BadRequest extends RuntimeException {
        BadRequest(String message) {
            super(message);
        }
    }

    /** A command's answer: its result, or one of the protocol's observable error codes. */
    record Outcome(Object result, String error) {
    }

    private static final Map<String, String> ROUTES = Map.of("check", "check", "force", "force");

    final String profile;
    private final long purgeInterval;
    private final VirtualTimer timer;
    private final DelayedOperationPurgatory<Op> purgatory;
    private final Map<String, Task> tasks = new ConcurrentHashMap<>();
    private final Map<String, Op> ops = new ConcurrentHashMap<>();
    private boolean shutDown;

    KafkaSystem(String profile, Map<?, ?> params) {
        if (!profile.equals("timer") && !profile.equals("purgatory"))
            throw new BadRequest("unknown profile " + profile);
        this.profile = profile;
        purgeInterval = integer(params, "purge_interval");
        timer = new VirtualTimer(integer(params, "tick_ms"), Math.toIntExact(integer(params, "wheel_size")),
            integer(params, "start_ms"));
        purgatory = profile.equals("purgatory")
            ? new DelayedOperationPurgatory<>("kpurgatory", timer, 0, Math.toIntExact(purgeInterval), false, true)
            : null;
    }

    /** Runs one command in the calling thread, within a begun {@link Call}, which collects the events it caused. */
    Outcome execute(String cmd, Map<String, Object> args) throws Exception {
        Call.current().route = ROUTES.getOrDefault(cmd, "try");
        if (purgatory == null ? !TIMER_COMMANDS.contains(cmd) : !PURGATORY_COMMANDS.contains(cmd))
            throw new BadRequest(cmd + " is not a command of the " + profile + " profile");
        switch (cmd) {
            case "timer_add": return answer(addTask(string(args, "task"), integer(args, "delay_ms")));
            case "timer_cancel": task(string(args, "task")).cancel(); return answer(null);
            case "advance": return answer(advance(integer(args, "to_ms")));
            case "size": return answer(timer.size());
            case "shutdown": return answer(shutdown());
            case "wheel": return answer(wheel());
            case "delay_queue": return answer(timer.queuedExpirations());
            case "watch": return watch(args);
            case "set_ready": op(args).ready = !Boolean.FALSE.equals(args.get("ready")); return answer(null);
            case "check": return answer(purgatory.checkAndComplete(new Key(string(args, "key"))));
            case "cancel_key": return answer(ids(purgatory.cancelForKey(new Key(string(args, "key")))));
            case "force": return answer(op(args).forceComplete());
            case "try": return answer(op(args).tryComplete());
            case "cancel": op(args).cancel(); return answer(null);
            case "watched": return answer(purgatory.watched());
            case "delayed": return answer(purgatory.numDelayed());
            case "watcher_keys": return answer(watcherKeys(purgatory));
            default: throw new BadRequest("unsupported command " + cmd);
        }
    }

    private static final List<String> TIMER_COMMANDS =
        List.of("timer_add", "timer_cancel", "advance", "size", "shutdown", "wheel", "delay_queue");
    private static final List<String> PURGATORY_COMMANDS = List.of("watch", "set_ready", "check", "cancel_key",
        "force", "try", "cancel", "advance", "watched", "delayed", "size", "shutdown", "wheel", "watcher_keys",
        "delay_queue");

    /** Whether this Kafka build has the private reaper step the purgatory's advance calls. */
    static boolean canDrivePurgatory() {
        try {
            DelayedOperationPurgatory.class.getDeclaredMethod("advanceClock", long.class);
            return true;
        } catch (NoSuchMethodException e) {
            return false;
        }
    }

    static boolean canReadWatcherKeys() {
        if (!Internals.hasFields(DelayedOperationPurgatory.class, "watcherLists")) return false;
        for (Class<?> nested : DelayedOperationPurgatory.class.getDeclaredClasses())
            if (nested.getSimpleName().equals("WatcherList")) return Internals.hasFields(nested, "watchersByKey");
        return false;
    }

    /** Ends the run if no shutdown did (a fresh init, or the end of input): the purgatory unregisters its gauges. */
    void close() throws Exception {
        if (!shutDown && purgatory != null) purgatory.shutdown();
        shutDown = true;
    }

    // --- commands ---------------------------------------------------------------------------------------------

    private Object addTask(String id, long delayMs) {
        Task task = tasks.computeIfAbsent(id, created -> new Task(created, delayMs));
        if (task.delayMs != delayMs)
            throw new BadRequest("task " + id + " was created with delay_ms " + task.delayMs + ", not " + delayMs);
        timer.add(task);
        return null;
    }

    /** Kafka's tryCompleteElseWatch; its IllegalArgumentException for an empty key list is the empty_keys error. */
    private Outcome watch(Map<String, Object> args) {
        String id = string(args, "op");
        Long delayMs = (Long) args.get("delay_ms");
        Long readyOn = (Long) args.get("ready_on");
        Op op = ops.computeIfAbsent(id, created -> {
            if (delayMs == null) throw new BadRequest("the first watch of op " + id + " must give delay_ms");
            return new Op(created, delayMs, readyOn);
        });
        if ((delayMs != null && delayMs != op.delayMs) || (readyOn != null && !readyOn.equals(op.readyOn)))
            throw new BadRequest(
                "op " + id + " was created with delay_ms " + op.delayMs + " and ready_on " + op.readyOn);
        List<Key> keys = new ArrayList<>();
        for (Object key : list(args, "keys")) keys.add(new Key(checkedString(key, "keys")));
        if (keys.isEmpty()) {
            try {
                purgatory.tryCompleteElseWatch(op, keys);
            } catch (IllegalArgumentException rejected) {
                return new Outcome(null, "empty_keys");
            }
            throw new BadRequest("Kafka accepted a watch without keys");
        }
        return answer(purgatory.tryCompleteElseWatch(op, keys));
    }

    /**
     * Sets the virtual clock, then, for the purgatory, calls the reaper's loop body (Kafka's private advanceClock:
     * drain the timer, then the purge check). The purge leaves no trace but its effects. Whether it fired: the check
     * reads numDelayed once, and once more to reset the estimate when it fires (the timer counts this thread's
     * reads). How many entries it removed: the drop in watched around the call, exact when no other command runs
     * meanwhile; under the concurrent feature, other threads' watches and checks blur it (the concurrent check does
     * not use purge counts), so it is then a lower estimate, never negative.
     */
    private Object advance(long toMs) throws Exception {
        timer.setNow(toMs);
        if (purgatory == null) {
            timer.advanceClock(0L);
            return null;
        }
        int watchedBefore = purgatory.watched();
        Internals.call(purgatory, "advanceClock", new Class<?>[] {long.class}, 0L);
        if (timer.sizeReadsSinceAdvance() > 1)
            Call.record("purge", "count", (long) Math.max(0, watchedBefore - purgatory.watched()));
        return null;
    }

    private List<String> shutdown() throws Exception {
        TreeSet<String> pending = new TreeSet<>();
        for (Task task : tasks.values()) if (timer.isPending(task)) pending.add(task.id);
        for (Op op : ops.values()) if (timer.isPending(op)) pending.add(op.id);
        close();
        return new ArrayList<>(pending);
    }

    private Map<String, Object> wheel() {
        List<Object> levels = new ArrayList<>();
        for (VirtualTimer.Level level : timer.levels()) {
            List<Object> buckets = new ArrayList<>();
            for (VirtualTimer.Bucket bucket : level.buckets()) {
                List<Object> entries = new ArrayList<>();
                for (TimerTask task : bucket.entries()) entries.add(label(task));
                buckets.add(object("slot", (long) bucket.slot(), "expiration_ms", bucket.expirationMs(),
                    "entries", entries));
            }
            levels.add(object("tick_ms", level.tickMs(), "wheel_size", (long) level.wheelSize(),
                "current_ms", level.currentMs(), "buckets", buckets));
        }
        return object("levels", levels);
    }

    /** The keys of Kafka's watcher map, from its private shards (watcherLists, each WatcherList's watchersByKey). */
    static List<String> watcherKeys(DelayedOperationPurgatory<?> purgatory) {
        TreeSet<String> keys = new TreeSet<>();
        for (Object shard : (List<?>) Internals.field(purgatory, "watcherLists"))
            for (Object key : ((Map<?, ?>) Internals.field(shard, "watchersByKey")).keySet())
                keys.add(((Key) key).label());
        return new ArrayList<>(keys);
    }

    // --- helpers ----------------------------------------------------------------------------------------------

    private static Outcome answer(Object result) {
        return new Outcome(result, null);
    }

    private Task task(String id) {
        Task task = tasks.get(id);
        if (task == null) throw new BadRequest("task " + id + " was never added");
        return task;
    }

    private Op op(Map<String, Object> args) {
        String id = string(args, "op");
        Op op = ops.get(id);
        if (op == null) throw new BadRequest("op " + id + " was never watched");
        return op;
    }

    private static List<String> ids(Collection<Op> ops) {
        List<String> ids = new ArrayList<>();
        for (Op op : ops) ids.add(op.id);
        return ids;
    }

    private static String label(TimerTask task) {
        return task instanceof Op ? ((Op) task).id : ((Task) task).id;
    }

    static Map<String, Object> object(Object... namesAndValues) {
        Map<String, Object> object = new LinkedHashMap<>();
        for (int i = 0; i < namesAndValues.length; i += 2)
            object.put((String) namesAndValues[i], namesAndValues[i + 1]);
        return object;
    }

    static long integer(Map<?, ?> args, String name) {
        Object value = args.get(name);
        if (!(value instanceof Long)) throw new BadRequest(name + ": an integer is required, got " + value);
        return (Long) value;
    }

    static String string(Map<?, ?> args, String name) {
        return checkedString(args.get(name), name);
    }

    private static String checkedString(Object value, String name) {
        if (!(value instanceof String)) throw new BadRequest(name + ": a string is required, got " + value);
        return (String) value;
    }

    private static List<?> list(Map<String, Object> args, String name) {
        Object value = args.get(name);
        if (!(value instanceof List)) throw new BadRequest(name + ": an array is required, got " + value);
        return (List<?>) value;
    }
}
