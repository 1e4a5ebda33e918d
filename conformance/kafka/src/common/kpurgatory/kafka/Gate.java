package kpurgatory.kafka;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;

/**
 * A point where a race schedule stops a call (the {@code gates} feature): the gated request's N-th tryComplete,
 * after it evaluated the op's condition and before it acts on it, waits here until the harness opens the gate. It
 * still holds whatever its caller holds (in Kafka, the op's lock), which is what the schedule is after.
 */
final class Gate {
    private final CompletableFuture<Boolean> reached = new CompletableFuture<>();
    private final CountDownLatch opened = new CountDownLatch(1);

    /** Completes with true once the gated call waits here, with false if its request finished without getting here. */
    CompletableFuture<Boolean> reached() {
        return reached;
    }

    void waitUntilOpen() {
        reached.complete(true);
        boolean interrupted = false;
        while (true) {
            try {
                opened.await();
                break;
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) Thread.currentThread().interrupt();
    }

    void open() {
        opened.countDown();
    }

    void passedBy() {
        reached.complete(false);
    }
}
