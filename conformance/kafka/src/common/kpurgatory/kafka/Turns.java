package kpurgatory.kafka;

import java.lang.reflect.Field;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

/**
 * The adapter's side of a controlled scheduler (the {@code scheduler} feature, specs/protocol.md §3.4). A request
 * sent with {@code "scheduled": true} runs on a thread of its own that stops at each point — the acquire or try of
 * one of the purgatory's locks — and says so on stdout ({@code {"seq":S,"sched":"point",...}}), then waits until the
 * harness sends {@code {"go":S}}. A thread that finds the lock held says {@code "wait"} and waits for its next go; one
 * that frees a lock says {@code "released"} and goes on. So one scheduled thread runs at a time, the one the harness
 * chose, and the harness, which knows every point, replays an interleaving exactly.
 *
 * <p>Every lock Kafka's purgatory has taken in some release is a point, so that a thread never stops while holding a
 * lock another scheduled thread could block on for real:
 * <ul>
 * <li>the op lock, a field {@code lock} from 0.11.0.2 on: set to a {@link ControlledLock} when the op is made (by
 * reflection: 4.1 on builds its own);
 * <li>the watcher map's read-write lock before 2.2.0 ({@code removeWatchersLock}), set when a run is first scheduled,
 * and after, the lock of each watcher shard a watched key falls in ({@code watchersLock});
 * <li>the op's and the watch lists' monitors, before 0.11.0.2 and 0.10.1.1: {@link MonitorAgent} makes each
 * {@code synchronized} of the purgatory's classes call {@link #enter} and {@link #exited}.
 * </ul>
 * Kafka's timer keeps its own locks (its buckets', its read-write lock), held only in code without a point inside.
 */
public final class Turns {
    private Turns() {
    }

    private static final ThreadLocal<Turn> CURRENT = new ThreadLocal<>();
    private static final Map<Long, Turn> TURNS = new ConcurrentHashMap<>();
    private static final AtomicLong LOCKS = new AtomicLong();
    private static final StackWalker WALKER = StackWalker.getInstance();
    /** The monitors scheduled threads hold, by identity: who holds each, how often, and the name its lines give it. */
    private static final Map<Object, Monitor> MONITORS = new IdentityHashMap<>();
    /** Where the scheduler lines go: the adapter's stdout. */
    static volatile Consumer<Map<String, Object>> out;
    /** Set by {@link MonitorAgent}: the purgatory's monitors are points. */
    static volatile boolean monitorsControlled;

    private static final class Turn {
        final long seq;
        final Semaphore go = new Semaphore(0);
        volatile boolean deadlocked;

        Turn(long seq) {
            this.seq = seq;
        }
    }

    private static final class Monitor {
        final long id = LOCKS.incrementAndGet();
        Turn holder;
        int holds;
    }

    /** The calling thread runs scheduled request {@code seq} until {@link #end}. */
    static void begin(long seq) {
        Turn turn = new Turn(seq);
        TURNS.put(seq, turn);
        CURRENT.set(turn);
    }

    static void end() {
        Turn turn = CURRENT.get();
        if (turn != null) TURNS.remove(turn.seq);
        CURRENT.remove();
    }

    /** The harness's go for scheduled request {@code seq} (from the reading thread). */
    static void go(long seq, boolean deadlock) {
        Turn turn = TURNS.get(seq);
        if (turn == null) throw new IllegalArgumentException("go: no scheduled request " + seq + " waits");
        if (deadlock) turn.deadlocked = true;
        turn.go.release();
    }

    /**
     * Whether the op lock can be a point: a field {@code lock} a {@link ControlledLock} can take (0.11.0.2 on), or
     * the op's monitor under {@link MonitorAgent} (the agent runs where Kafka's classes have monitors and ASM is on
     * the classpath: run.sh).
     */
    static boolean canControl() {
        if (monitorsControlled) return true;
        for (String name : new String[] {"org.apache.kafka.server.purgatory.DelayedOperation",
                                         "kafka.server.DelayedOperation"}) {
            try {
                Field field = Class.forName(name, false, Turns.class.getClassLoader()).getDeclaredField("lock");
                return field.getType().isAssignableFrom(ControlledLock.class);
            } catch (ClassNotFoundException | NoSuchFieldException e) {
                // the other era's class, or an op without a lock field
            }
        }
        return false;
    }

    /** Give {@code op} an op lock whose acquire and try are points (its field {@code lock}, whatever the era). */
    static void control(Object op) {
        for (Class<?> type = op.getClass(); type != null; type = type.getSuperclass()) {
            Field field = Internals.findField(type, "lock");
            if (field != null) {
                replace(op, field, new ControlledLock("op"));
                return;
            }
        }
    }

    /** Give {@code purgatory}'s one watcher map (before 2.2.0) a controlled read-write lock. */
    static void controlWatcherMap(Object purgatory) {
        Field map = Internals.findField(purgatory.getClass(), "removeWatchersLock");
        if (map != null) replace(purgatory, map, new ControlledReadWriteLock("watcher map"));
    }

    /**
     * Give the watcher shard of {@code key} (2.2.0 on) a controlled lock, unless it has one: the shard Kafka picks,
     * {@code Math.abs(key.hashCode() % shards)}. Only shards that hold a run's keys need points: a sweep over the 512
     * (watched, a purge) finds the others empty, and would otherwise stop 512 times. Called by a scheduled thread,
     * while it alone runs, so no thread holds the lock it replaces (a shard lock is held at no point).
     */
    static void controlShard(Object purgatory, Object key) {
        Field lists = Internals.findField(purgatory.getClass(), "watcherLists");
        if (lists == null) return;
        Object shards = read(purgatory, lists);  // a Scala array (2.2 to 3.9) or a Java list (4.0 on)
        List<?> each = shards instanceof Object[] array ? Arrays.asList(array) : (List<?>) shards;
        Object shard = each.get(Math.abs(key.hashCode() % each.size()));
        Field lock = Internals.findField(shard.getClass(), "watchersLock");
        if (lock != null && !(read(shard, lock) instanceof ControlledLock))
            replace(shard, lock, new ControlledLock("watcher shard"));
    }

    private static Object read(Object target, Field field) {
        try {
            field.setAccessible(true);
            return field.get(target);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("cannot read " + field + ": " + e, e);
        }
    }

    /** Sets {@code field} to {@code lock} when its type takes it (a build whose lock is another type keeps its own). */
    private static void replace(Object target, Field field, Object lock) {
        if (!field.getType().isInstance(lock)) return;
        try {
            field.setAccessible(true);
            field.set(target, lock);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("cannot give " + field + " a controlled lock: " + e, e);
        }
    }

    private static void say(Turn turn, String what, Object... fields) {
        Map<String, Object> line = KafkaSystem.object("seq", turn.seq, "sched", what);
        for (int i = 0; i < fields.length; i += 2) line.put((String) fields[i], fields[i + 1]);
        out.accept(line);
    }

    private static void stop(Turn turn, String kind, String role) {
        say(turn, "point", "kind", kind, "where", role + " in " + caller());
        turn.go.acquireUninterruptibly();
    }

    /** Says that the lock is held elsewhere and waits for the next go (a deadlock's go fails the request). */
    private static void await(Turn turn, long lock, String role) {
        say(turn, "wait", "lock", lock, "role", role);
        turn.go.acquireUninterruptibly();
        if (turn.deadlocked) throw new IllegalStateException("deadlock: every scheduled thread left waits for a lock "
            + "another holds (this one: " + role + ")");
    }

    /**
     * The method of Kafka's that takes the lock: the first frame outside this class, the lock classes and Kafka's
     * lock helpers (CoreUtils.inLock and the like); a Scala closure is named after the method it is written in.
     */
    private static String caller() {
        return WALKER.walk(frames -> frames
            .filter(frame -> !frame.getClassName().startsWith(Turns.class.getName())
                && !frame.getClassName().startsWith("kafka.utils.CoreUtils")
                && !frame.getClassName().startsWith("java.util.concurrent."))
            .findFirst().map(Turns::method).orElse("?"));
    }

    /**
     * {@code $anonfun$checkAndComplete$1} (Scala 2.12 on) or {@code apply} of {@code …$$anonfun$checkAndComplete$1}
     * (Scala 2.11) is {@code checkAndComplete}, and so is {@code kafka$server$…$$checkAndComplete} (2.11's name of a
     * private method a closure calls).
     */
    private static String method(StackWalker.StackFrame frame) {
        String name = frame.getMethodName();
        // Scala 2.11's name of a private method a closure calls
        if (name.contains("$$") && !name.contains("$anonfun$"))
            name = name.substring(name.lastIndexOf("$$") + 2);
        String closure = name.contains("$anonfun$") ? name : frame.getClassName().contains("$$anonfun$")
            ? frame.getClassName() : null;
        if (closure == null) return name;
        String rest = closure.substring(closure.lastIndexOf("$anonfun$") + "$anonfun$".length());
        return rest.contains("$") ? rest.substring(0, rest.indexOf('$')) : rest;
    }

    /** A {@code synchronized} of Kafka's purgatory is about to take {@code monitor}'s monitor (MonitorAgent). */
    public static void enter(Object monitor) {
        Turn turn = CURRENT.get();
        if (turn == null) return;
        String role = monitorRole(monitor);
        stop(turn, "acquire", role);
        while (true) {
            Monitor held;
            synchronized (MONITORS) {
                held = MONITORS.computeIfAbsent(monitor, free -> new Monitor());
                if (held.holder == null || held.holder == turn) {
                    held.holder = turn;
                    held.holds++;
                    return;
                }
            }
            await(turn, held.id, role);
        }
    }

    /** A {@code synchronized} of Kafka's purgatory let {@code monitor}'s monitor go (MonitorAgent). */
    public static void exited(Object monitor) {
        Turn turn = CURRENT.get();
        if (turn == null) return;
        long freed;
        synchronized (MONITORS) {
            Monitor held = MONITORS.get(monitor);
            if (held == null || held.holder != turn || --held.holds > 0) return;
            MONITORS.remove(monitor);
            freed = held.id;
        }
        say(turn, "released", "lock", freed, "role", monitorRole(monitor));
    }

    /** An op's monitor (the op lock before 0.11.0.2), or a watch list's (the list Watchers guards, before 0.10.1.1). */
    private static String monitorRole(Object monitor) {
        for (Class<?> type = monitor.getClass(); type != null; type = type.getSuperclass())
            if (type.getSimpleName().equals("DelayedOperation")) return "op";
        return "watch list";
    }

    /** A lock with points: a ReentrantLock (the type Kafka declares) that threads outside a turn use as is. */
    static final class ControlledLock extends ReentrantLock {
        private final long id = LOCKS.incrementAndGet();
        private final String role;

        ControlledLock(String role) {
            this.role = role;
        }

        @Override
        public void lock() {
            Turn turn = CURRENT.get();
            if (turn == null) {
                super.lock();
                return;
            }
            stop(turn, "acquire", role);
            while (!super.tryLock()) await(turn, id, role);
        }

        @Override
        public boolean tryLock() {
            Turn turn = CURRENT.get();
            if (turn != null) stop(turn, "try", role);
            return super.tryLock();
        }

        @Override
        public void unlock() {
            super.unlock();
            Turn turn = CURRENT.get();
            if (turn != null && !isLocked()) say(turn, "released", "lock", id, "role", role);
        }
    }

    /** The watcher map's read-write lock with points: its read and write halves are one lock to the harness. */
    static final class ControlledReadWriteLock extends ReentrantReadWriteLock {
        private final long id = LOCKS.incrementAndGet();
        private final String role;
        private final ReadLock read = new ReadLock(this) {
            @Override
            public void lock() {
                take(super::tryLock, super::lock, "read");
            }

            @Override
            public void unlock() {
                super.unlock();
                if (getReadHoldCount() == 0) released();
            }
        };
        private final WriteLock write = new WriteLock(this) {
            @Override
            public void lock() {
                take(super::tryLock, super::lock, "write");
            }

            @Override
            public void unlock() {
                super.unlock();
                if (!isWriteLockedByCurrentThread()) released();
            }
        };

        ControlledReadWriteLock(String role) {
            this.role = role;
        }

        @Override
        public ReadLock readLock() {
            return read;
        }

        @Override
        public WriteLock writeLock() {
            return write;
        }

        private void take(BooleanSupplier tryLock, Runnable lock, String kind) {
            Turn turn = CURRENT.get();
            if (turn == null) {
                lock.run();
                return;
            }
            stop(turn, kind, role);
            while (!tryLock.getAsBoolean()) await(turn, id, role);
        }

        private void released() {
            Turn turn = CURRENT.get();
            if (turn != null) say(turn, "released", "lock", id, "role", role);
        }
    }
}
