package kpurgatory.kafka;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/**
 * Kafka keeps what some read-outs need private: the wheel's fields, the purgatory's watcher map, its estimate counter
 * and the reaper's loop body; 0.9's purgatory keeps its timer so too. This reads them (and sets that timer) by name. A
 * Kafka build whose internals differ loses the read-out that needs them (the adapter leaves its feature out of hello),
 * not the check. Scala 2.10 and 2.11 name a private field that a closure reads after its class
 * ({@code kafka$utils$Pool$$pool}), so a field is found by its name or by that.
 */
public final class Internals {
    private Internals() {
    }

    /** Whether {@code type} declares every one of {@code names} as a field. */
    public static boolean hasFields(Class<?> type, String... names) {
        for (String name : names) if (findField(type, name) == null) return false;
        return true;
    }

    /** The field {@code type} declares by this name, or by Scala's expanded name for it; null if none. */
    static Field findField(Class<?> type, String name) {
        for (Field field : type.getDeclaredFields())
            if (field.getName().equals(name) || field.getName().endsWith("$$" + name)) return field;
        return null;
    }

    public static Object field(Object target, String name) {
        try {
            Field field = findField(target.getClass(), name);
            if (field == null) throw new NoSuchFieldException(name);
            field.setAccessible(true);
            return field.get(target);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("this Kafka build's " + target.getClass().getName() + " has no field '"
                + name + "' the adapter can read", e);
        }
    }

    /** Sets a private field, final or not (0.9's purgatory keeps the timer it built in a final one). */
    public static void setField(Object target, String name, Object value) {
        try {
            Field field = findField(target.getClass(), name);
            if (field == null) throw new NoSuchFieldException(name);
            field.setAccessible(true);
            field.set(target, value);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("this Kafka build's " + target.getClass().getName() + " has no field '"
                + name + "' the adapter can set", e);
        }
    }

    /** Calls a private method; what it throws is rethrown as it is, so Kafka's own exceptions reach the report. */
    public static Object call(Object target, String name, Class<?>[] types, Object... args) throws Exception {
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
