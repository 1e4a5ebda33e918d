package kpurgatory.live.agent;

import java.util.IdentityHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/** What the advice calls (the advice itself is inlined into Kafka's classes and stays a few instructions): each hook
 *  builds one event and queues it. */
public final class Hooks {
    private Hooks() {
    }

    private static final Map<String, AtomicLong> COUNTERS = new ConcurrentHashMap<>();
    private static final AtomicLong UNWATCHED = new AtomicLong();

    /** Timers by identity -> their executor thread name: a copy-on-write snapshot, written when a timer is built. */
    private static volatile Map<Object, String> timers = new IdentityHashMap<>();

    /** Per reaper thread: what the purge of the advance in progress removed, or -1 while no purge ran. */
    private static final ThreadLocal<long[]> PURGED = ThreadLocal.withInitial(() -> new long[] {-1});

    /** Per thread, the op inside each of tryComplete, onComplete, onExpiration and run: an op class's override that
     *  calls its superclass's (both instrumented) is one call, recorded once, by the outermost. */
    static final int TRY = 0, COMPLETE = 1, EXPIRE = 2, RUN = 3;
    private static final ThreadLocal<Object[]> INSIDE = ThreadLocal.withInitial(() -> new Object[4]);
    /** What enter() returns for an inner (super) call. */
    private static final Object NESTED = new Object();

    /** Marks the op as inside the method; returns what leave() restores, or NESTED for a super call. */
    public static Object enter(int method, Object op) {
        Object[] inside = INSIDE.get();
        Object outer = inside[method];
        if (outer == op) {
            return NESTED;
        }
        inside[method] = op;
        return outer;
    }

    public static void leave(int method, Object op, Object outer) {
        if (outer != NESTED) {
            INSIDE.get()[method] = outer;
        }
    }

    /** The op's id, assigned on first sight and kept for its life: "<purgatory>-<n>" when first seen entering a
     *  purgatory (always so in Kafka, which watches an op before anything else touches it), "task-<n>" otherwise. */
    static String opId(Object op, String purgatory) {
        Tagged t = (Tagged) op;
        String id = t.getKpurgatoryOp();
        if (id == null) {
            id = purgatory == null ? "task-" + UNWATCHED.incrementAndGet()
                    : purgatory + "-" + COUNTERS.computeIfAbsent(purgatory, p -> new AtomicLong()).incrementAndGet();
            t.setKpurgatoryOp(id);
        }
        if (purgatory != null && t.getKpurgatoryPurgatory() == null) {
            t.setKpurgatoryPurgatory(purgatory);
        }
        return id;
    }

    private static Ev opEvent(byte kind, byte phase, Object op) {
        Ev e = Recorder.ev(kind, phase);
        e.where = ((Tagged) op).getKpurgatoryPurgatory();
        e.what = opId(op, null);
        return e;
    }

    private static void result(Ev e, long result, Throwable thrown) {
        if (thrown != null) {
            e.thrown = thrown.getClass().getName();
        } else {
            e.result = result;
        }
    }

    public static String watchCall(Object purgatory, Object op, Object keys) {
        String name = Kafka.purgatoryName(purgatory);
        Ev e = Recorder.ev(Ev.WATCH, Ev.CALL);
        e.where = name;
        e.what = opId(op, name);
        e.extra = op.getClass().getSimpleName();
        e.keys = Kafka.keyLabels(keys);
        e.ms = ((Tagged) op).getKpurgatoryDelay();
        Recorder.put(e);
        return name;
    }

    public static void watchReturn(String purgatory, Object op, boolean result, Throwable thrown) {
        Ev e = Recorder.ev(Ev.WATCH, Ev.RETURN);
        e.where = purgatory;
        e.what = opId(op, purgatory);
        result(e, result ? 1 : 0, thrown);
        Recorder.put(e);
    }

    public static String checkCall(Object purgatory, Object key) {
        Ev e = Recorder.ev(Ev.CHECK, Ev.CALL);
        e.where = Kafka.purgatoryName(purgatory);
        e.what = Kafka.keyLabel(key);
        Recorder.put(e);
        return e.what;
    }

    public static void checkReturn(Object purgatory, String key, int result, Throwable thrown) {
        Ev e = Recorder.ev(Ev.CHECK, Ev.RETURN);
        e.where = Kafka.purgatoryName(purgatory);
        e.what = key;
        result(e, result, thrown);
        Recorder.put(e);
    }

    public static void tryReturn(Object op, Object outer, boolean result, Throwable thrown) {
        leave(TRY, op, outer);
        if (outer == NESTED) {
            return;
        }
        Ev e = opEvent(Ev.TRY, Ev.RETURN, op);
        result(e, result ? 1 : 0, thrown);
        Recorder.put(e);
    }

    public static void forceReturn(Object op, boolean result, Throwable thrown) {
        Ev e = opEvent(Ev.FORCE, Ev.RETURN, op);
        result(e, result ? 1 : 0, thrown);
        Recorder.put(e);
    }

    public static Object complete(Object op) {
        Object outer = enter(COMPLETE, op);
        if (outer != NESTED) {
            Recorder.put(opEvent(Ev.COMPLETE, Ev.NONE, op));
        }
        return outer;
    }

    public static void completed(Object op, Object outer) {
        leave(COMPLETE, op, outer);
        if (outer != NESTED) {
            Faults.afterComplete(op, ((Tagged) op).getKpurgatoryPurgatory());
        }
    }

    public static Object expire(Object op) {
        Object outer = enter(EXPIRE, op);
        if (outer != NESTED) {
            Recorder.put(opEvent(Ev.EXPIRE, Ev.NONE, op));
        }
        return outer;
    }

    public static void advanceCall(Object purgatory, long timeoutMs) {
        PURGED.get()[0] = -1;
        Ev e = Recorder.ev(Ev.ADVANCE, Ev.CALL);
        e.where = Kafka.purgatoryName(purgatory);
        e.ms = timeoutMs;
        int[] counters = Kafka.counters(purgatory);
        e.delayed = counters[0];
        e.watched = counters[1];
        Recorder.put(e);
    }

    public static void advanceReturn(Object purgatory, long timeoutMs, Throwable thrown) {
        long[] purged = PURGED.get();
        String name = Kafka.purgatoryName(purgatory);
        if (purged[0] >= 0) {
            Ev p = Recorder.ev(Ev.PURGE, Ev.NONE);
            p.where = name;
            p.purged = purged[0];
            Recorder.put(p);
        }
        Ev e = Recorder.ev(Ev.ADVANCE, Ev.RETURN);
        e.where = name;
        e.ms = timeoutMs;
        int[] counters = Kafka.counters(purgatory);
        e.delayed = counters[0];
        e.watched = counters[1];
        if (purged[0] >= 0) {
            e.purged = purged[0];
        }
        e.thrown = thrown == null ? null : thrown.getClass().getName();
        purged[0] = -1;
        Recorder.put(e);
    }

    /** One watcher list's purge (Watchers.purgeCompleted) returned: counted into the advance in progress. */
    public static void purged(int removed) {
        long[] purged = PURGED.get();
        purged[0] = Math.max(purged[0], 0) + removed;
    }

    public static boolean skipPurge() {
        return Faults.skipPurge;
    }

    /** null (Kafka's own sweep runs) unless skip_watcher_removal is on. */
    public static Integer sweepKeepingCompleted(Object watchers) {
        return Faults.skipPurge ? Faults.sweepKeepingCompleted(watchers) : null;
    }

    public static void timerBuilt(Object timer, String executorName) {
        synchronized (Hooks.class) {
            Map<Object, String> next = new IdentityHashMap<>(timers);
            next.put(timer, "executor-" + executorName);  // SystemTimer's executor threads carry this prefix
            timers = next;
        }
    }

    private static String timerName(Object timer) {
        return timers.get(timer);
    }

    public static void timerAdd(Object timer, Object task) {
        Tagged t = (Tagged) task;
        Ev e = Recorder.ev(Ev.TIMER_ADD, Ev.NONE);
        e.where = timerName(timer);
        e.what = opId(task, null);
        e.extra = t.getKpurgatoryPurgatory() == null ? null : e.what;
        e.ms = t.getKpurgatoryDelay();
        t.setKpurgatoryTimer(e.where);
        Recorder.put(e);
    }

    private static void timerAdvance(Object timer, long timeoutMs, byte phase, boolean result, Throwable thrown) {
        Ev e = Recorder.ev(Ev.TIMER_ADVANCE, phase);
        e.where = timerName(timer);
        e.ms = timeoutMs;
        if (phase == Ev.RETURN) {
            result(e, result ? 1 : 0, thrown);
        }
        Recorder.put(e);
    }

    public static void timerAdvanceCall(Object timer, long timeoutMs) {
        timerAdvance(timer, timeoutMs, Ev.CALL, false, null);
    }

    public static void timerAdvanceReturn(Object timer, long timeoutMs, boolean result, Throwable thrown) {
        timerAdvance(timer, timeoutMs, Ev.RETURN, result, thrown);
    }

    public static Object taskRun(Object task) {
        Object outer = enter(RUN, task);
        if (outer != NESTED) {
            Ev e = Recorder.ev(Ev.TIMER_RUN, Ev.NONE);
            e.where = ((Tagged) task).getKpurgatoryTimer();
            e.what = opId(task, null);
            Recorder.put(e);
        }
        return outer;
    }

    public static long taskDelay(long declared) {
        return Faults.taskDelay(declared);
    }

    public static void taskBuilt(Object task, long declared) {
        ((Tagged) task).setKpurgatoryDelay(declared);
    }
}
