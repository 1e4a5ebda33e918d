package kpurgatory.live;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.InvocationTargetException;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

/** Ends a JVM when the process that started it ends, however it ends: the parent holds the write end of this JVM's
 *  standard input and never writes to it, so the end of that input means the parent is gone (a SIGKILL runs none of
 *  the parent's own hooks, but the kernel closes its pipes). The JVM then exits, which runs its shutdown hooks (the
 *  broker's clean shutdown, the recorder's stopping of its broker), and is halted if those take over a minute.
 *
 *  As a main class it runs another main under that watch: {@code Lifeline MAIN-CLASS ARGS...} (the broker's). */
public final class Lifeline {
    private Lifeline() {
    }

    private static final long HOOKS_S = 60;

    /** Watches standard input on a daemon thread; at its end, exits with {@code status}. */
    static void exitWhenStdinCloses(int status) {
        Thread watch = new Thread(() -> {
            try (InputStream in = System.in) {
                byte[] ignored = new byte[256];
                while (in.read(ignored) != -1) {
                    // the parent writes nothing; anything it does write is not a reason to stop
                }
            } catch (IOException gone) {
                // a broken pipe is an end as well
            }
            Thread halt = new Thread(() -> {
                try {
                    TimeUnit.SECONDS.sleep(HOOKS_S);
                } catch (InterruptedException e) {
                    return;
                }
                Runtime.getRuntime().halt(status);
            }, "lifeline-halt");
            halt.setDaemon(true);
            halt.start();
            System.exit(status);
        }, "lifeline");
        watch.setDaemon(true);
        watch.start();
    }

    public static void main(String[] args) throws Throwable {
        if (args.length == 0) {
            System.err.println("usage: Lifeline MAIN-CLASS [ARGS...]");
            System.exit(2);
        }
        exitWhenStdinCloses(143);  // as SIGTERM's
        try {
            Class.forName(args[0]).getMethod("main", String[].class)
                    .invoke(null, (Object) Arrays.copyOfRange(args, 1, args.length));
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
