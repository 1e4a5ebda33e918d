package kpurgatory.kafka;

/**
 * The Scala purgatory's tasks and ops, on {@link ScalaOperation} (Kafka's DelayedOperation with the constructor the
 * release has). A timer task is an op whose run is a run event, because the Scala timer's TimerTask is a trait a Java
 * class cannot mix in the same way under every Scala version.
 */
final class ScalaOps {
    private ScalaOps() {
    }

    static class Task extends ScalaOperation implements Operations.Scheduled {
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

    static class Op extends ScalaOperation implements Operations.Delayed {
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
