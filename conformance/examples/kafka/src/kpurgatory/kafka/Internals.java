package kpurgatory.kafka;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/**
 * Kafka keeps what some read-outs need private: the wheel's fields, the purgatory's watcher map, its estimate counter
 * and the reaper's loop body. This reads them by name. A Kafka build whose internals differ loses the read-out that
 * needs them (the adapter leaves its feature out of hello), not the check.
 */
public final class Internals {
    private Internals() {
    }

    /** Whether {@code type} declares every one of {@code names} as a field. */
    static boolean hasFields(Class<?> type, String... names) {
        try {
            for (String name : names) type.getDeclaredField(name);
            return true;
        } catch (NoSuchFieldException e) {
            return false;
        }
    }

    public static Object field(Object target, String name) {
        try {
            Field field = target.getClass().getDeclaredField(name);
            field.setAccessible(true);
            return field.get(target);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("this Kafka build's " + target.getClass().getName() + " has no field '"
                + name + "' the adapter can read", e);
        }
    }

    /** Calls a private method; what it throws is rethrown as it is, so Kafka's own exceptions reach the report. */
    static Object call(Object target, String name, Class<?>[] types, Object... args) throws Exception {
        Method method = target.getClass().getDeclaredMethod(name, types);
        method.setAccessible(true);
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception) throw (Exception) cause;
            throw (Error) cause;
        }
    }
}
