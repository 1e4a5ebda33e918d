package io.github.kpurgatory.vectors;

import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The binding instance a run is on, and the daemon thread its calls run on, each within the per-call limit
 * (specs/vectors.md §4). A call that fails, hangs or crashes drops the instance: the thread is interrupted and
 * abandoned (a call that ignores the interrupt spins on until the JVM exits, never holding the run), the instance
 * closed in the background, and the next case gets a new one from the factory.
 */
final class Session {
    private final Callable<Binding> factory;
    private final long limitMs;
    private Binding binding;
    private ExecutorService worker;

    Session(Callable<Binding> factory, long limitMs) {
        this.factory = factory;
        this.limitMs = limitMs;
    }

    /** The current instance, or a new one. */
    Binding binding() throws Unanswered {
        if (binding == null) {
            worker = Executors.newSingleThreadExecutor(daemon("kpurgatory-binding"));
            binding = call("making the binding", factory);
        }
        return binding;
    }

    /** Runs {@code body} on the instance's thread; what it returned, or how it gave no answer (instance dropped). */
    <T> T call(String what, Callable<T> body) throws Unanswered {
        Future<T> future = worker.submit(body);
        try {
            return future.get(limitMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            future.cancel(true);  // interrupted: a stdio call stops waiting and kills its adapter
            drop();
            throw new Unanswered("hung", "no answer to " + what + " within " + seconds() + " s");
        } catch (ExecutionException e) {
            drop();
            throw e.getCause() instanceof Unanswered unanswered ? unanswered
                    : new Unanswered("failed", e.getCause().toString());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            drop();
            throw new Unanswered("failed", "interrupted waiting for " + what);
        }
    }

    /** Drops the instance, closing it in the background (the thread doing so); the factory makes the next one. */
    Thread drop() {
        Binding dropped = binding;
        binding = null;
        if (worker != null) {
            worker.shutdownNow();
            worker = null;
        }
        Thread closing = daemon("kpurgatory-binding-close").newThread(() -> {
            try {
                if (dropped != null) {
                    dropped.close();
                }
            } catch (Exception ignored) {
                // an instance that failed may fail to close too: it is gone either way
            }
        });
        closing.start();
        return closing;
    }

    /** The end of the run: closes the instance, waiting for it up to the limit. */
    void close() throws InterruptedException {
        drop().join(limitMs);
    }

    private String seconds() {
        return limitMs % 1000 == 0 ? String.valueOf(limitMs / 1000) : String.valueOf(limitMs / 1000.0);
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return body -> {
            Thread thread = new Thread(body, name);
            thread.setDaemon(true);
            return thread;
        };
    }
}
