package kpurgatory.live.agent;

/** One recorded event, filled on the instrumented thread and turned into JSON by the writer thread (so the advice only
 *  copies references and numbers). Which fields mean what depends on the kind; see Recorder.format. */
final class Ev {
    static final byte WATCH = 0, CHECK = 1, TRY = 2, FORCE = 3, COMPLETE = 4, EXPIRE = 5, ADVANCE = 6, PURGE = 7,
            TIMER_ADD = 8, TIMER_ADVANCE = 9, TIMER_RUN = 10;
    static final byte NONE = 0, CALL = 1, RETURN = 2;
    static final long ABSENT = Long.MIN_VALUE;

    byte kind;
    byte phase;
    long tNs;
    String thread;
    long tid;
    /** purgatory, or the timer for timer events */
    String where;
    /** op, or the key of a check, or the task of a timer event */
    String what;
    /** opclass of a watch, or the op of a timer_add */
    String extra;
    String[] keys;
    /** result (bool as 0/1) or ABSENT; delay_ms or timeout_ms; delayed; watched; purged */
    long result = ABSENT, ms = ABSENT, delayed = ABSENT, watched = ABSENT, purged = ABSENT;
    /** the class of an exception thrown by the call, instead of a result */
    String thrown;
}
