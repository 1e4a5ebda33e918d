package kpurgatory.kafka;

import kpurgatory.kafka.Operations.Delayed;
import kpurgatory.kafka.Operations.Script;

import kafka.server.DelayedOperation;
import kafka.server.DelayedOperationPurgatory;

import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

/**
 * The Scala purgatory's era (kafka.server, 0.10.0 to 3.9), on either timer. Its API moved a little across those
 * releases, so what moved is called by reflection: the constructor (timerEnabled from 0.11.0.0; the timer's type
 * changed at 3.6), cancelForKey (from 0.11.0.0) and numDelayed (delayed before 2.4.0). The ops' constructor changed
 * too (an optional lock from 0.11.0.2), which a subclass must name: run.sh compiles the {@code ScalaOperation} base
 * that matches the build.
 */
final class KafkaEra implements Era {
    private static final Method CANCEL_FOR_KEY = method("cancelForKey", Object.class);
    private static final Method DELAYED =
        method("numDelayed") != null ? method("numDelayed") : method("delayed");

    @Override
    public Class<?> purgatoryClass() {
        return DelayedOperationPurgatory.class;
    }

    /** The reaper's loop body is the purgatory's advanceClock, public in the Scala purgatory. */
    @Override
    public boolean canAdvancePurgatory() {
        return method("advanceClock", long.class) != null;
    }

    @Override
    public boolean hasCancelForKey() {
        return CANCEL_FOR_KEY != null;
    }

    @Override
    public Clock timer(long tickMs, int wheelSize, long startMs) {
        return Timers.create(tickMs, wheelSize, startMs);
    }

    @Override
    public Purgatory purgatory(Clock timer, int purgeInterval) {
        DelayedOperationPurgatory<DelayedOperation> kafka = create(timer, purgeInterval);
        return new Purgatory() {
            @Override
            public boolean tryCompleteElseWatch(Delayed op, List<Object> keys) {
                return kafka.tryCompleteElseWatch((DelayedOperation) op, scalaList(keys));
            }

            @Override
            public int checkAndComplete(Object key) {
                return kafka.checkAndComplete(key);
            }

            @Override
            public List<Delayed> cancelForKey(Object key) {
                List<Delayed> cancelled = new ArrayList<>();
                scala.collection.Iterator<?> ops =
                    ((scala.collection.immutable.List<?>) call(kafka, CANCEL_FOR_KEY, key)).iterator();
                while (ops.hasNext()) cancelled.add((Delayed) ops.next());
                return cancelled;
            }

            @Override
            public int watched() {
                return kafka.watched();
            }

            @Override
            public int delayed() {
                return (Integer) call(kafka, DELAYED);
            }

            @Override
            public void advanceClock() {
                kafka.advanceClock(0L);
            }

            @Override
            public void shutdown() {
                kafka.shutdown();
            }

            @Override
            public Object kafka() {
                return kafka;
            }
        };
    }

    @Override
    public Operations.Scheduled task(String id, long delayMs) {
        return new ScalaOps.Task(id, delayMs);
    }

    @Override
    public Delayed op(Script script, Clock timer) {
        return new ScalaOps.Op(script);
    }

    @Override
    public Object key(String label) {
        return new Operations.Key(label);
    }

    /**
     * The purgatory over the given timer, without a reaper thread: (name, timer, brokerId, purgeInterval,
     * reaperEnabled[, timerEnabled]); Scala's default arguments are no Java overloads, so all are passed.
     */
    @SuppressWarnings("unchecked")
    private static DelayedOperationPurgatory<DelayedOperation> create(Clock timer, int purgeInterval) {
        for (Constructor<?> constructor : DelayedOperationPurgatory.class.getConstructors()) {
            Class<?>[] types = constructor.getParameterTypes();
            if (types.length < 5 || types[0] != String.class || !types[1].isInstance(timer)) continue;
            Object[] args = types.length == 5
                ? new Object[] {"kpurgatory", timer, 0, purgeInterval, false}
                : new Object[] {"kpurgatory", timer, 0, purgeInterval, false, true};
            try {
                return (DelayedOperationPurgatory<DelayedOperation>) constructor.newInstance(args);
            } catch (InvocationTargetException e) {
                throw rethrown(e);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }
        throw new IllegalStateException("this Kafka build's DelayedOperationPurgatory has no constructor taking "
            + "(name, timer, brokerId, purgeInterval, reaperEnabled[, timerEnabled]) for " + timer.getClass());
    }

    /** Kafka's keys as a scala.collection.immutable.List, which is the Seq of every Scala version. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static scala.collection.immutable.List<Object> scalaList(List<Object> keys) {
        scala.collection.immutable.List list = scala.collection.immutable.Nil$.MODULE$;
        for (int i = keys.size() - 1; i >= 0; i--) list = list.$colon$colon(keys.get(i));
        return list;
    }

    private static Method method(String name, Class<?>... types) {
        try {
            return DelayedOperationPurgatory.class.getMethod(name, types);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    private static Object call(Object target, Method method, Object... args) {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw rethrown(e);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Kafka's own exception or error, as it was thrown. */
    private static RuntimeException rethrown(InvocationTargetException e) {
        Throwable cause = e.getCause();
        if (cause instanceof Error) throw (Error) cause;
        if (cause instanceof RuntimeException) return (RuntimeException) cause;
        return new IllegalStateException(cause);
    }
}
