package kpurgatory.kafka;

/**
 * 0.9's tasks and ops: the Scala purgatory's ({@link ScalaOps}), carrying their deadline, which a 0.9 TimerTask does
 * itself ({@code expirationMs}; later releases' timer entries hold it).
 */
final class DeadlineOps {
    private DeadlineOps() {
    }

    /**
     * 0.9's DelayedOperation fixes its deadline when it is built: delay + the wall clock. This op returns delay + the
     * virtual now when it was built instead, which is the same rule on the virtual clock: watching it again keeps it.
     */
    static final class Op extends ScalaOps.Op {
        private final long deadlineMs;

        Op(Operations.Script script, long nowMs) {
            super(script);
            deadlineMs = nowMs + script.delayMs();
        }

        @Override
        public long expirationMs() {
            return deadlineMs;
        }
    }

    /** A task of the timer profile takes now + delay as it enters the timer, as a later release's entry does. */
    static final class Task extends ScalaOps.Task {
        private volatile long deadlineMs;

        Task(String id, long delayMs) {
            super(id, delayMs);
        }

        void enter(long nowMs) {
            deadlineMs = nowMs + scheduledDelayMs();
        }

        @Override
        public long expirationMs() {
            return deadlineMs;
        }
    }
}
