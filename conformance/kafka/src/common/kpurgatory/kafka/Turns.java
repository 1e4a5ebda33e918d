package kpurgatory.kafka;

import java.lang.reflect.Field;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;

/**
 * The adapter's side of a controlled scheduler (the {@code scheduler} feature, specs/protocol.md §3.4). A request
 * sent with {@code "scheduled": true} runs on a thread of its own that stops at each point — an op lock's acquire or
 * try — and says so on stdout ({@code {"seq":S,"sched":"point",...}}), then waits until the harness sends
 * {@code {"go":S}}. A thread that finds the lock held says {@code "wait"} and waits for its next go; one that frees a
 * lock says {@code "released"} and goes on. So one scheduled thread runs at a time, the one the harness chose, and
 * the harness, which knows every point, replays an interleaving exactly.
 *
 * <p>Kafka's op lock is the one point: the op's {@code lock} field is set to a {@link ControlledLock} when the op is
 * made (by reflection: 4.1 on builds its own). Kafka's other locks (watcher shards, the timer's buckets) are held
 * only in code with no point inside, so a thread never stops holding one, and they never block a scheduled thread.
 */
public final class Turns {
    private Turns() {
    }

    private static final ThreadLocal<Turn> CURRENT = new ThreadLocal<>();
    private static final Map<Long, Turn> TURNS = new ConcurrentHashMap<>();
    private static final AtomicLong LOCKS = new AtomicLong();
    private static final StackWalker WALKER = StackWalker.getInstance();
    /** Where the scheduler lines go: the adapter's stdout. */
    static volatile Consumer<Map<String, Object>> out;

    private static final class Turn {
        final long seq;
        final Semaphore go = new Semaphore(0);
        volatile boolean deadlocked;

        Turn(long seq) {
            this.seq = seq;
        }
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
     * Whether Kafka's op keeps its lock in a field {@code lock} that a {@link ControlledLock} can take (0.11.0.2 on;
     * before, the op lock is the op's monitor, which the adapter cannot make a point).
     */
    static boolean canControl() {
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
            Field field;
            try {
                field = type.getDeclaredField("lock");
            } catch (NoSuchFieldException e) {
                continue;
            }
            if (!field.getType().isAssignableFrom(ControlledLock.class)) return;
            try {
                field.setAccessible(true);
                field.set(op, new ControlledLock());
            } catch (ReflectiveOperationException | RuntimeException e) {
                throw new IllegalStateException("cannot give the op a controlled lock: " + e, e);
            }
            return;
        }
    }

    private static void say(Turn turn, String what, Object... fields) {
        Map<String, Object> line = KafkaSystem.object("seq", turn.seq, "sched", what);
        for (int i = 0; i < fields.length; i += 2) line.put((String) fields[i], fields[i + 1]);
        out.accept(line);
    }

    /** The method of Kafka's (or the adapter's) that takes the lock: the first frame outside this class. */
    private static String caller() {
        return WALKER.walk(frames -> frames.filter(frame -> !frame.getClassName().startsWith(Turns.class.getName()))
            .findFirst().map(StackWalker.StackFrame::getMethodName).orElse("?"));
    }

    /** Kafka's op lock with points: a ReentrantLock (the type 4.1 on declares) that threads outside a turn use as is. */
    static final class ControlledLock extends ReentrantLock {
        private final long id = LOCKS.incrementAndGet();

        @Override
        public void lock() {
            Turn turn = CURRENT.get();
            if (turn == null) {
                super.lock();
                return;
            }
            stop(turn, "acquire");
            while (!super.tryLock()) {
                say(turn, "wait", "lock", id, "role", "op");
                turn.go.acquireUninterruptibly();
                if (turn.deadlocked) throw new IllegalStateException("deadlock: every scheduled thread left waits for "
                    + "a lock another holds (this one: an op lock)");
            }
        }

        @Override
        public boolean tryLock() {
            Turn turn = CURRENT.get();
            if (turn != null) stop(turn, "try");
            return super.tryLock();
        }

        @Override
        public void unlock() {
            super.unlock();
            Turn turn = CURRENT.get();
            if (turn != null && !isLocked()) say(turn, "released", "lock", id, "role", "op");
        }

        private static void stop(Turn turn, String kind) {
            say(turn, "point", "kind", kind, "where", "op in " + caller());
            turn.go.acquireUninterruptibly();
        }
    }
}
