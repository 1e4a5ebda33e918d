package kpurgatory.kafka;

import kpurgatory.kafka.Operations.Delayed;
import kpurgatory.kafka.Operations.Labelled;
import kpurgatory.kafka.Operations.Scheduled;
import kpurgatory.kafka.Operations.Script;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

/**
 * One run (from an {@code init} to the next): Kafka's DelayedOperationPurgatory, or a bare timer, on kpurgatory's
 * virtual-clock timer, and the protocol's commands as calls into them, through the {@link Era} run.sh compiled in.
 * Thread-safe for the concurrent feature: the tasks and ops are found or created in concurrent maps, and every call
 * into Kafka takes Kafka's own locks.
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
    private final Era era;
    private final Era.Clock timer;
    private final Era.Purgatory purgatory;
    private final Map<String, Scheduled> tasks = new ConcurrentHashMap<>();
    private final Map<String, Delayed> ops = new ConcurrentHashMap<>();
    private boolean shutDown;
    private volatile boolean scheduled;

    KafkaSystem(Era era, String profile, Map<?, ?> params) {
        if (!profile.equals("timer") && !profile.equals("purgatory"))
            throw new BadRequest("unknown profile " + profile);
        this.era = era;
        this.profile = profile;
        int purgeInterval = Math.toIntExact(integer(params, "purge_interval"));
        timer = era.timer(integer(params, "tick_ms"), Math.toIntExact(integer(params, "wheel_size")),
            integer(params, "start_ms"));
        purgatory = profile.equals("purgatory") ? era.purgatory(timer, purgeInterval) : null;
        if (purgatory != null) timer.purgeCheck().watch(purgatory::watched);
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
            case "set_ready": op(args).script().ready = !Boolean.FALSE.equals(args.get("ready")); return answer(null);
            case "check": return answer(purgatory.checkAndComplete(era.key(string(args, "key"))));
            case "cancel_key": return answer(cancelKey(string(args, "key")));
            case "force": return answer(op(args).forceComplete());
            case "try": return answer(op(args).tryComplete());
            case "cancel": op(args).cancel(); return answer(null);
            case "watched": return answer(purgatory.watched());
            case "delayed": return answer(purgatory.delayed());
            case "watcher_keys": return answer(watcherKeys(purgatory.kafka()));
            default: throw new BadRequest("unsupported command " + cmd);
        }
    }

    private static final List<String> TIMER_COMMANDS =
        List.of("timer_add", "timer_cancel", "advance", "size", "shutdown", "wheel", "delay_queue");
    private static final List<String> PURGATORY_COMMANDS = List.of("watch", "set_ready", "check", "cancel_key",
        "force", "try", "cancel", "advance", "watched", "delayed", "size", "shutdown", "wheel", "watcher_keys",
        "delay_queue");

    /** Whether the purgatory's watcher map can be read: its shards' maps (from 2.2.0), or its one map (before). */
    static boolean canReadWatcherKeys(Class<?> purgatory) {
        if (Internals.findField(purgatory, "watchersForKey") != null) return true;
        if (Internals.findField(purgatory, "watcherLists") == null) return false;
        for (Class<?> nested : purgatory.getDeclaredClasses())
            if (nested.getSimpleName().equals("WatcherList"))
                return Internals.findField(nested, "watchersByKey") != null;
        return false;
    }

    /**
     * How the purgatory spreads its watch lists, for hello: from 2.2.0 (KAFKA-6431) 512 lists, a key's picked by
     * Math.abs(key.hashCode() % 512), where the adapter's keys hash as their labels; before, one map.
     */
    static Map<String, Object> watcherShards(Class<?> purgatory) {
        return Internals.findField(purgatory, "watcherLists") != null
            ? object("count", 512L, "hash", "java-string-hashcode") : object("count", 1L, "hash", "none");
    }

    /**
     * A scheduled request is about to start (on the reading thread, while no scheduled thread runs): from the first,
     * the purgatory's watcher locks are points too (the one map's now, a shard's when a watch first uses a key of it).
     * Runs nobody schedules keep Kafka's own.
     */
    void schedule() {
        if (scheduled || purgatory == null) return;
        Turns.controlWatcherMap(purgatory.kafka());
        scheduled = true;
    }

    /** Ends the run if no shutdown did (a fresh init, or the end of input): the purgatory unregisters its gauges. */
    void close() throws Exception {
        if (!shutDown && purgatory != null) purgatory.shutdown();
        shutDown = true;
    }

    // --- commands ---------------------------------------------------------------------------------------------

    private Object addTask(String id, long delayMs) {
        Scheduled task = tasks.computeIfAbsent(id, created -> era.task(created, delayMs));
        if (task.scheduledDelayMs() != delayMs)
            throw new BadRequest(
                "task " + id + " was created with delay_ms " + task.scheduledDelayMs() + ", not " + delayMs);
        timer.schedule(task);
        return null;
    }

    /**
     * Kafka's tryCompleteElseWatch. An empty key list is the empty_keys error: Kafka's Java purgatory throws an
     * IllegalArgumentException, the Scala one fails an assert (an AssertionError).
     */
    private Outcome watch(Map<String, Object> args) {
        String id = string(args, "op");
        Long delayMs = (Long) args.get("delay_ms");
        Long readyOn = (Long) args.get("ready_on");
        Delayed op = ops.computeIfAbsent(id, created -> {
            if (delayMs == null) throw new BadRequest("the first watch of op " + id + " must give delay_ms");
            Delayed made = era.op(new Script(created, delayMs, readyOn), timer);
            Turns.control(made);
            return made;
        });
        Script script = op.script();
        if ((delayMs != null && delayMs != script.delayMs) || (readyOn != null && !readyOn.equals(script.readyOn)))
            throw new BadRequest(
                "op " + id + " was created with delay_ms " + script.delayMs + " and ready_on " + script.readyOn);
        List<Object> keys = new ArrayList<>();
        for (Object key : list(args, "keys")) keys.add(era.key(checkedString(key, "keys")));
        if (scheduled) for (Object key : keys) Turns.controlShard(purgatory.kafka(), key);
        if (keys.isEmpty()) {
            try {
                purgatory.tryCompleteElseWatch(op, keys);
            } catch (IllegalArgumentException | AssertionError rejected) {
                return new Outcome(null, "empty_keys");
            }
            throw new BadRequest("Kafka accepted a watch without keys");
        }
        return answer(purgatory.tryCompleteElseWatch(op, keys));
    }

    /**
     * Sets the virtual clock, then, for the purgatory, calls the reaper's loop body (Kafka's private advanceClock:
     * drain the timer, then the purge check). The purge leaves no trace but its effects. Whether it fired, and what
     * the purgatory watched just before it: {@link PurgeCheck}. How many entries it removed: the drop in watched
     * across the purge, exact when no other command runs meanwhile; under the concurrent feature, other threads'
     * watches and checks blur it (the concurrent check does not use purge counts), so it is then a lower estimate,
     * never negative.
     */
    private Object advance(long toMs) throws Exception {
        timer.setNow(toMs);
        if (purgatory == null) {
            timer.advance();
            return null;
        }
        purgatory.advanceClock();
        PurgeCheck check = timer.purgeCheck();
        if (check.fired())
            Call.record("purge", "count", (long) Math.max(0, check.watchedBeforePurge() - purgatory.watched()));
        return null;
    }

    private List<String> shutdown() throws Exception {
        TreeSet<String> pending = new TreeSet<>();
        for (Scheduled task : tasks.values()) if (timer.isPending(task)) pending.add(task.label());
        for (Delayed op : ops.values()) if (timer.isPending(op)) pending.add(op.label());
        close();
        return new ArrayList<>(pending);
    }

    private Map<String, Object> wheel() {
        List<Object> levels = new ArrayList<>();
        for (Era.Clock.Level level : timer.levels()) {
            List<Object> buckets = new ArrayList<>();
            for (Era.Clock.Bucket bucket : level.buckets()) {
                List<Object> entries = new ArrayList<>();
                for (Object task : bucket.entries()) entries.add(((Labelled) task).label());
                buckets.add(object("slot", (long) bucket.slot(), "expiration_ms", bucket.expirationMs(),
                    "entries", entries));
            }
            levels.add(object("tick_ms", level.tickMs(), "wheel_size", (long) level.wheelSize(),
                "current_ms", level.currentMs(), "buckets", buckets));
        }
        return object("levels", levels);
    }

    /** cancelForKey, which releases before 0.11.0.0 do not have (their hello lists cancel_key as unsupported). */
    private List<String> cancelKey(String key) {
        if (!era.hasCancelForKey())
            throw new BadRequest("cancel_key: this Kafka release has no cancelForKey (it came in 0.11.0.0)");
        List<String> ids = new ArrayList<>();
        for (Delayed op : purgatory.cancelForKey(era.key(key))) ids.add(op.label());
        return ids;
    }

    /**
     * The keys of Kafka's watcher map, from its private fields: the shards (watcherLists, each WatcherList's
     * watchersByKey) from 2.2.0, one map (watchersForKey) before; a map is a java.util.Map or Kafka's Pool over one.
     */
    static List<String> watcherKeys(Object purgatory) {
        List<Object> maps = new ArrayList<>();
        if (Internals.findField(purgatory.getClass(), "watchersForKey") != null) {
            maps.add(Internals.field(purgatory, "watchersForKey"));
        } else {
            Object shards = Internals.field(purgatory, "watcherLists");
            for (Object shard : shards instanceof Object[] ? List.of((Object[]) shards) : (List<?>) shards)
                maps.add(Internals.field(shard, "watchersByKey"));
        }
        TreeSet<String> keys = new TreeSet<>();
        for (Object map : maps) {
            Map<?, ?> byKey = (Map<?, ?>) (map instanceof Map ? map : Internals.field(map, "pool"));
            for (Object key : byKey.keySet()) keys.add(((Labelled) key).label());
        }
        return new ArrayList<>(keys);
    }

    // --- helpers ----------------------------------------------------------------------------------------------

    private static Outcome answer(Object result) {
        return new Outcome(result, null);
    }

    private Scheduled task(String id) {
        Scheduled task = tasks.get(id);
        if (task == null) throw new BadRequest("task " + id + " was never added");
        return task;
    }

    private Delayed op(Map<String, Object> args) {
        String id = string(args, "op");
        Delayed op = ops.get(id);
        if (op == null) throw new BadRequest("op " + id + " was never watched");
        return op;
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
