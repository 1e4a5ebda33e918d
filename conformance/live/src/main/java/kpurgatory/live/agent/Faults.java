package kpurgatory.live.agent;

import java.util.concurrent.atomic.AtomicLong;

/** The project's own purgatory faults, switched on by the agent option fault=NAME, to show that the judge finds a real
 *  bug in a live broker. They change what the broker does, not what is recorded:
 *  <ul>
 *  <li>double_complete: every Nth op whose onComplete runs has it run a second time, in the same thread, right after
 *      the first (exactly-once broken);</li>
 *  <li>skip_watcher_removal: completed ops are never removed from the watcher lists: the purge
 *      (Watchers.purgeCompleted) removes nothing and returns 0, and a check's sweep of a key's list
 *      (Watchers.tryCompleteWatched) is replaced by the fault's own, which tries the ops not yet completed and
 *      leaves every op in the list (so lists never empty and are never dropped either);</li>
 *  <li>early_expire: every Nth timer task (every op is one) is built with a quarter of its delay, while the recording
 *      keeps the delay the op was declared with (an op expires before its deadline).</li>
 *  </ul>
 *  fault_every=N (default 10) picks which; fault_purgatory=NAME limits double_complete to one purgatory. */
final class Faults {
    static final String NONE = "none";

    static String name = NONE;
    static long every = 10;
    static String purgatory;
    static boolean skipPurge;

    private static final AtomicLong COMPLETES = new AtomicLong();
    private static final AtomicLong TASKS = new AtomicLong();
    private static final ThreadLocal<boolean[]> AGAIN = ThreadLocal.withInitial(() -> new boolean[1]);

    private Faults() {
    }

    static void configure(String fault, long n, String onlyPurgatory) {
        check(fault, n);
        name = fault;
        every = n;
        purgatory = onlyPurgatory;
        skipPurge = fault.equals("skip_watcher_removal");
    }

    static void check(String fault, long n) {
        if (!(fault.equals(NONE) || fault.equals("double_complete") || fault.equals("skip_watcher_removal")
                || fault.equals("early_expire"))) {
            throw new IllegalArgumentException("unknown fault " + fault
                    + " (known: double_complete, skip_watcher_removal, early_expire)");
        }
        if (n < 1) {
            throw new IllegalArgumentException("fault_every must be at least 1");
        }
    }

    static String describe() {
        if (name.equals(NONE)) {
            return NONE;
        }
        return name + " every=" + every + (purgatory == null ? "" : " purgatory=" + purgatory);
    }

    /** The skip_watcher_removal sweep of one key's watcher list: each op not completed is tried under its lock
     *  (safeTryComplete); nothing is removed. Returns how many this sweep completed, as Kafka's sweep does. */
    static int sweepKeepingCompleted(Object watchers) {
        int completed = 0;
        for (Object op : Kafka.watchedOps(watchers)) {
            if (!Kafka.isCompleted(op) && Kafka.safeTryComplete(op)) {
                completed++;
            }
        }
        return completed;
    }

    /** The delay a new timer task really gets. */
    static long taskDelay(long declared) {
        if (name.equals("early_expire") && TASKS.incrementAndGet() % every == 0) {
            return declared / 4;
        }
        return declared;
    }

    /** After an op's onComplete returned: run it once more if this op is picked (never from the repeat itself). */
    static void afterComplete(Object op, String opPurgatory) {
        if (!name.equals("double_complete") || (purgatory != null && !purgatory.equals(opPurgatory))) {
            return;
        }
        boolean[] again = AGAIN.get();
        if (again[0] || COMPLETES.incrementAndGet() % every != 0) {
            return;
        }
        again[0] = true;
        try {
            Kafka.onComplete(op);
        } finally {
            again[0] = false;
        }
    }
}
