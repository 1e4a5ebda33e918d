package kpurgatory.live.agent;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/** What the agent reads from Kafka's objects without compiling against Kafka (one agent for the Scala purgatory of
 *  3.x and the Java one of 4.x): members are found by name once per class and remembered. */
final class Kafka {
    private Kafka() {
    }

    /** The purgatory's name field: "purgatoryName" in 4.x, a Scala-mangled name ending so in 3.x. */
    private static final ClassValue<Field> NAME = new ClassValue<>() {
        @Override
        protected Field computeValue(Class<?> type) {
            for (Field f : type.getDeclaredFields()) {
                if (f.getName().endsWith("purgatoryName") && f.getType() == String.class) {
                    f.setAccessible(true);
                    return f;
                }
            }
            throw new IllegalStateException("no purgatoryName field in " + type.getName());
        }
    };

    static String purgatoryName(Object purgatory) {
        try {
            return (String) NAME.get(purgatory.getClass()).get(purgatory);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private static final ClassValue<Method> LABEL = new ClassValue<>() {
        @Override
        protected Method computeValue(Class<?> type) {
            return accessible(type, "keyLabel");
        }
    };

    /** Labels by key. Kafka's keys are value classes (Scala case classes, Java records) built afresh for each request,
     *  and their keyLabel() formats a string (String.format: about a microsecond, most of what a check's recording
     *  cost before this cache); equal keys have equal labels, so a label is computed once per distinct key. Distinct
     *  keys are few (partitions, groups, members); the cache starts over should they pass a bound. */
    private static final ConcurrentHashMap<Object, String> LABELS = new ConcurrentHashMap<>();
    private static final int LABELS_BOUND = 100_000;

    /** A DelayedOperationKey's keyLabel(), or its toString() for a key of another kind. */
    static String keyLabel(Object key) {
        if (key == null) {
            return null;
        }
        String label = LABELS.get(key);
        if (label == null) {
            Method m = LABEL.get(key.getClass());
            label = m == null ? String.valueOf(key) : (String) invoke(m, key);
            if (LABELS.size() >= LABELS_BOUND) {
                LABELS.clear();
            }
            LABELS.put(key, label);
        }
        return label;
    }

    /** scala.collection.IterableOnce.iterator() and its Iterator's hasNext()/next(), for the keys of a 3.x watch. */
    private static final ClassValue<Method[]> SCALA_ITER = new ClassValue<>() {
        @Override
        protected Method[] computeValue(Class<?> type) {
            try {
                ClassLoader loader = type.getClassLoader();
                Class<?> once = Class.forName("scala.collection.IterableOnce", false, loader);
                Class<?> iter = Class.forName("scala.collection.Iterator", false, loader);
                return new Method[] {once.getMethod("iterator"), iter.getMethod("hasNext"), iter.getMethod("next")};
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot iterate the keys of type " + type.getName(), e);
            }
        }
    };

    /** The labels of a watch's keys: a java.util.List in 4.x, a scala Seq in 3.x. */
    static String[] keyLabels(Object keys) {
        List<String> labels = new ArrayList<>();
        if (keys instanceof Iterable<?> iterable) {
            for (Object key : iterable) {
                labels.add(keyLabel(key));
            }
        } else if (keys != null) {
            Method[] m = SCALA_ITER.get(keys.getClass());
            Object it = invoke(m[0], keys);
            while ((Boolean) invoke(m[1], it)) {
                labels.add(keyLabel(invoke(m[2], it)));
            }
        }
        return labels.toArray(new String[0]);
    }

    private static final ClassValue<Method[]> COUNTERS = new ClassValue<>() {
        @Override
        protected Method[] computeValue(Class<?> type) {
            return new Method[] {accessible(type, "numDelayed"), accessible(type, "watched")};
        }
    };

    /** numDelayed() and watched() of a purgatory (the reaper's own counters). */
    static int[] counters(Object purgatory) {
        Method[] m = COUNTERS.get(purgatory.getClass());
        return new int[] {(Integer) invoke(m[0], purgatory), (Integer) invoke(m[1], purgatory)};
    }

    private static final ClassValue<Method> ON_COMPLETE = new ClassValue<>() {
        @Override
        protected Method computeValue(Class<?> type) {
            return accessible(type, "onComplete");
        }
    };

    /** Runs an op's onComplete() (the double_complete fault). */
    static void onComplete(Object op) {
        invoke(ON_COMPLETE.get(op.getClass()), op);
    }

    private static final ClassValue<Field> OPERATIONS = new ClassValue<>() {
        @Override
        protected Field computeValue(Class<?> type) {
            try {
                Field f = type.getDeclaredField("operations");
                f.setAccessible(true);
                return f;
            } catch (NoSuchFieldException e) {
                throw new IllegalStateException("no operations field in " + type.getName(), e);
            }
        }
    };

    /** The ops a Watchers list holds (its own concurrent queue, iterated weakly consistently as Kafka does). */
    static Iterable<?> watchedOps(Object watchers) {
        try {
            return (Iterable<?>) OPERATIONS.get(watchers.getClass()).get(watchers);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private static final ClassValue<Method[]> OP_STATE = new ClassValue<>() {
        @Override
        protected Method[] computeValue(Class<?> type) {
            return new Method[] {accessible(type, "isCompleted"), accessible(type, "safeTryComplete")};
        }
    };

    static boolean isCompleted(Object op) {
        return (Boolean) invoke(OP_STATE.get(op.getClass())[0], op);
    }

    static boolean safeTryComplete(Object op) {
        return (Boolean) invoke(OP_STATE.get(op.getClass())[1], op);
    }

    /** A no-argument method of the class or its supertypes (the nearest), made callable whatever its access. */
    private static Method accessible(Class<?> type, String name) {
        for (Class<?> c = type; c != null; c = c.getSuperclass()) {
            for (Method m : c.getDeclaredMethods()) {
                if (m.getName().equals(name) && m.getParameterCount() == 0) {
                    m.setAccessible(true);
                    return m;
                }
            }
        }
        try {
            Method m = type.getMethod(name);
            m.setAccessible(true);
            return m;
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    private static Object invoke(Method m, Object target) {
        try {
            return m.invoke(target);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot call " + m, e);
        }
    }
}
