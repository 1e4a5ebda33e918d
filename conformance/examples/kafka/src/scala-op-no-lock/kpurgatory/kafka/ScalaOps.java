package kpurgatory.kafka;

import kafka.server.DelayedOperation;

/**
 * The Scala purgatory's tasks and ops, for releases whose DelayedOperation takes only its delay (before 0.11.0.2;
 * the same classes as scala-op-lock's otherwise; 0.9's extend them with the deadline they carry). A timer task is an op whose run is a run event, because the Scala
 * timer's TimerTask is a trait a Java class cannot mix in the same way under every Scala version.
 */
final class ScalaOps {
    private ScalaOps() {
    }

    static class Task extends DelayedOperation implements Operations.Scheduled {
        private final String id;
        private final long delayMs;

        Task(String id, long delayMs) {
            super(delayMs);
            this.id = id;
            this.delayMs = delayMs;
        }

        @Override
        public String label() {
            return id;
        }

        @Override
        public long scheduledDelayMs() {
            return delayMs;
        }

        @Override
        public void run() {
            Operations.ran(this);
        }

        @Override
        public boolean tryComplete() {
            return false;
        }

        @Override
        public void onComplete() {
        }

        @Override
        public void onExpiration() {
        }
    }

    static class Op extends DelayedOperation implements Operations.Delayed {
        private final Operations.Script script;

        Op(Operations.Script script) {
            super(script.delayMs());
            this.script = script;
        }

        @Override
        public Operations.Script script() {
            return script;
        }

        @Override
        public boolean tryComplete() {
            return script.tryComplete(this);
        }

        @Override
        public void run() {
            script.run(super::run);
        }

        @Override
        public void onComplete() {
            script.onComplete();
        }

        @Override
        public void onExpiration() {
            script.onExpiration();
        }
    }
}
