package kpurgatory.live.agent;

import net.bytebuddy.asm.Advice;

/** The advice Byte Buddy inlines into Kafka's methods. Each piece only hands its arguments to Hooks; an agent failure
 *  is suppressed (the broker must never fail because of its recorder). */
final class Advices {
    private Advices() {
    }

    /** DelayedOperationPurgatory.tryCompleteElseWatch(op, keys). */
    static final class Watch {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static String enter(@Advice.This Object purgatory, @Advice.Argument(0) Object op,
                            @Advice.Argument(1) Object keys) {
            return Hooks.watchCall(purgatory, op, keys);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.Enter String purgatory, @Advice.Argument(0) Object op, @Advice.Return boolean result,
                         @Advice.Thrown Throwable thrown) {
            Hooks.watchReturn(purgatory, op, result, thrown);
        }
    }

    /** DelayedOperationPurgatory.checkAndComplete(key). */
    static final class Check {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static String enter(@Advice.This Object purgatory, @Advice.Argument(0) Object key) {
            return Hooks.checkCall(purgatory, key);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object purgatory, @Advice.Enter String key, @Advice.Return int result,
                         @Advice.Thrown Throwable thrown) {
            Hooks.checkReturn(purgatory, key, result, thrown);
        }
    }

    /** DelayedOperationPurgatory.advanceClock(timeoutMs): the reaper's step. */
    static final class Advance {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Object purgatory, @Advice.Argument(0) long timeoutMs) {
            Hooks.advanceCall(purgatory, timeoutMs);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object purgatory, @Advice.Argument(0) long timeoutMs,
                         @Advice.Thrown Throwable thrown) {
            Hooks.advanceReturn(purgatory, timeoutMs, thrown);
        }
    }

    /** Watchers.purgeCompleted(): counted into the advance; skipped (returning 0) under skip_watcher_removal. */
    static final class Purge {
        @Advice.OnMethodEnter(skipOn = Advice.OnNonDefaultValue.class, suppress = Throwable.class)
        static boolean enter() {
            return Hooks.skipPurge();
        }

        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.Return int removed) {
            Hooks.purged(removed);
        }
    }

    /** Watchers.tryCompleteWatched(): under skip_watcher_removal, replaced by the fault's own sweep that keeps
     *  completed ops in the list. */
    static final class Sweep {
        @Advice.OnMethodEnter(skipOn = Advice.OnNonDefaultValue.class, suppress = Throwable.class)
        static Integer enter(@Advice.This Object watchers) {
            return Hooks.sweepKeepingCompleted(watchers);
        }

        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.Enter Integer swept, @Advice.Return(readOnly = false) int completed) {
            if (swept != null) {
                completed = swept;
            }
        }
    }

    /** tryComplete() of each DelayedOperation class (an override calling super's is recorded once). */
    static final class Try {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static Object enter(@Advice.This Object op) {
            return Hooks.enter(Hooks.TRY, op);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object op, @Advice.Enter Object outer, @Advice.Return boolean result,
                         @Advice.Thrown Throwable thrown) {
            Hooks.tryReturn(op, outer, result, thrown);
        }
    }

    /** DelayedOperation.forceComplete(). */
    static final class Force {
        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object op, @Advice.Return boolean result, @Advice.Thrown Throwable thrown) {
            Hooks.forceReturn(op, result, thrown);
        }
    }

    /** onComplete() of each DelayedOperation class. */
    static final class Complete {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static Object enter(@Advice.This Object op) {
            return Hooks.complete(op);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object op, @Advice.Enter Object outer) {
            Hooks.completed(op, outer);
        }
    }

    /** onExpiration() of each DelayedOperation class. */
    static final class Expire {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static Object enter(@Advice.This Object op) {
            return Hooks.expire(op);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object op, @Advice.Enter Object outer) {
            Hooks.leave(Hooks.EXPIRE, op, outer);
        }
    }

    /** SystemTimer's constructor with the executor name first. */
    static final class TimerBuilt {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.This Object timer, @Advice.Argument(0) String executorName) {
            Hooks.timerBuilt(timer, executorName);
        }
    }

    /** SystemTimer.add(task). */
    static final class TimerAdd {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Object timer, @Advice.Argument(0) Object task) {
            Hooks.timerAdd(timer, task);
        }
    }

    /** SystemTimer.advanceClock(timeoutMs). */
    static final class TimerAdvance {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Object timer, @Advice.Argument(0) long timeoutMs) {
            Hooks.timerAdvanceCall(timer, timeoutMs);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object timer, @Advice.Argument(0) long timeoutMs, @Advice.Return boolean result,
                         @Advice.Thrown Throwable thrown) {
            Hooks.timerAdvanceReturn(timer, timeoutMs, result, thrown);
        }
    }

    /** run() of each TimerTask class: the timer's executor runs the task. */
    static final class TaskRun {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static Object enter(@Advice.This Object task) {
            return Hooks.taskRun(task);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class, suppress = Throwable.class)
        static void exit(@Advice.This Object task, @Advice.Enter Object outer) {
            Hooks.leave(Hooks.RUN, task, outer);
        }
    }

    /** TimerTask(delayMs): remembers the declared delay; early_expire shortens the real one. */
    static final class TaskBuilt {
        @Advice.OnMethodEnter
        static long enter(@Advice.Argument(value = 0, readOnly = false) long delayMs) {
            long declared = delayMs;
            delayMs = Hooks.taskDelay(declared);
            return declared;
        }

        @Advice.OnMethodExit
        static void exit(@Advice.This Object task, @Advice.Enter long declared) {
            Hooks.taskBuilt(task, declared);
        }
    }
}
