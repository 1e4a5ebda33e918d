package kpurgatory.live.agent;

/** What the agent adds to Kafka's TimerTask (the base of every DelayedOperation, 3.6 on): the op id it assigns, the
 *  purgatory the op was first watched in, the timer it was added to, and the delay the op was built with (kept apart
 *  from Kafka's own delayMs so that the early_expire fault can shorten the real one while the recording keeps the
 *  declared one). Byte Buddy adds the fields and implements these accessors when the class loads. */
public interface Tagged {
    String getKpurgatoryOp();

    void setKpurgatoryOp(String op);

    String getKpurgatoryPurgatory();

    void setKpurgatoryPurgatory(String purgatory);

    long getKpurgatoryDelay();

    void setKpurgatoryDelay(long delayMs);

    /** The timer the task was last added to (its executor's thread name), for timer_run. */
    String getKpurgatoryTimer();

    void setKpurgatoryTimer(String timer);
}
