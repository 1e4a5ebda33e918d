/* kpurgatory.impl._core: the compiled core of kpurgatory.impl (see kpurgatory/impl/compiled.py for the Python face).
 *
 * What is here: the timer task as an intrusive list node, the buckets (circular doubly linked lists with a sentinel),
 * the hierarchical wheels with their lazily created overflow levels, the delay queue (a binary heap of buckets
 * ordered by expiration, then offer order), the shared entry counter, and the drain that releases due buckets,
 * cascades their entries and runs or hands over the expired ones. The wheel is Kafka's TimingWheel; the model
 * (kpurgatory/model/timer.py) explains it and the pure-Python twin (kpurgatory/impl/timer.py) is the same algorithm
 * line for line. User code (a task's run, the error hook, the hand-off to an executor) stays Python.
 *
 * Thread safety: the GIL is the lock, and every critical section is one C call that cannot give it up.
 * -----------------------------------------------------------------------------------------------------------------
 * CPython switches threads only inside Python code or a call that releases the GIL. Each method below touches the
 * wheels, buckets, heap and counter only in stretches that call no Python code and release nothing:
 *   - objects that can start a garbage collection (and with it arbitrary finalizers) are allocated before a stretch
 *     begins (the batch list of a drain), never inside it; growing a list or the heap only reallocates memory;
 *   - a reference the timer drops is dropped after the structure is consistent again (a deallocation may run
 *     __del__), or it is moved into a list that keeps the object alive;
 *   - user code (run, on_error, the executor hand-off, the reaper wake-up) is called between stretches only.
 * So each stretch is atomic with respect to every other thread, and an add, a cancel, the release of one bucket or
 * a read-out is linearizable at the point where it runs; this replaces the single timer lock of the pure-Python
 * implementation. Free-threaded builds of CPython are not supported (the module does not declare itself safe for
 * them). The drain releases one bucket per stretch and hands its expired tasks over before polling the next, as
 * Kafka's reaper does; a task run in between sees a consistent timer and may add, cancel or re-add tasks.
 *
 * A task's life: IDLE (never added, or cancelled) -> LINKED (in a bucket; the timer holds a reference) -> EXPIRED
 * (handed over to run) -> DONE (ran, or dropped by shutdown). Re-adding a task moves it to LINKED from any state, and
 * a cancel moves it to IDLE from any state, so a task handed over and then cancelled or re-added before its turn is
 * skipped at its turn: the pure-Python implementation's "entry is still the task's current entry" rule.
 *
 * The purgatory part: the op (a timer task with a `completed` flag and a lock), the shard map of watch lists, the
 * estimate of operations and the purge sweep. Its critical sections:
 *   - completing an op: the test and the set of `completed` are one stretch, so exactly one of any number of racing
 *     force_complete calls wins (the compare-and-set Kafka uses); the winner then cancels the timeout and calls
 *     on_complete outside any lock;
 *   - the estimate: incremented and reset in one stretch each (Kafka's AtomicInteger);
 *   - Kafka's per-op lock stays around every try_complete the purgatory makes, because try_complete is user code
 *     that runs with the GIL coming and going: an OpLock (reentrant) unless the op was given a lock of its own. The
 *     watch-then-try-again of try_complete_else_watch holds it throughout, so a check that runs once the op is on a
 *     list waits for it and then finds the op: no lost wakeup;
 *   - a shard's dict and lists: a shard lock, because a key's __hash__/__eq__ and the allocation of a list can run
 *     Python code. No user callback runs under a shard lock; a check walks a copy and rebuilds the list under it.
 * The op and shard locks are thread ids taken in one stretch; a thread that finds one taken releases the GIL while
 * it waits (see spin_wait). Lock order, as in the pure-Python implementation: op lock, then a shard lock; the timer
 * has no lock to order.
 *
 * Faults: `faults` is a bit set of seeded bugs, zero except under `kpurgatory mutants`, which checks that the
 * conformance suite kills each one in this code as it does in the pure-Python implementation. Each is one
 * branch on a field already in cache.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <unistd.h>

typedef __int128 i128;

enum { IDLE = 0, LINKED = 1, EXPIRED = 2, DONE = 3 };

enum {
    F_BUCKET_OFF_BY_ONE = 1 << 0,
    F_EXPIRED_AT_NEXT_TICK = 1 << 1,
    F_OVERFLOW_STARTS_AHEAD = 1 << 2,
    F_FLUSH_HEAD_ONLY = 1 << 3,
    F_REQUEUED_ON_EVERY_ADD = 1 << 4,
    F_QUEUED_ONLY_WHEN_NEW = 1 << 5,
    F_LATE_BY_ONE_MS = 1 << 6,
    F_MICROSECOND_QUEUE = 1 << 7,
    F_CANCEL_KEEPS_ENTRY = 1 << 8,
    F_WINDOW_END_INSIDE = 1 << 9,
    F_START_NOT_ROUNDED = 1 << 10,
    F_ADVANCE_ROUNDS_UP = 1 << 11,
    F_BUCKET_ROUNDS_UP = 1 << 12,
};

static const struct { const char *name; int bit; } FAULTS[] = {
    {"bucket_off_by_one", F_BUCKET_OFF_BY_ONE},
    {"expired_on_add_off_by_one", F_EXPIRED_AT_NEXT_TICK},
    {"overflow_wrong_start", F_OVERFLOW_STARTS_AHEAD},
    {"flush_drops_entries", F_FLUSH_HEAD_ONLY},
    {"requeued_on_every_add", F_REQUEUED_ON_EVERY_ADD},
    {"requeued_only_when_new", F_QUEUED_ONLY_WHEN_NEW},
    {"late_by_one_ms", F_LATE_BY_ONE_MS},
    {"kafka_938_time_unit", F_MICROSECOND_QUEUE},
    {"cancel_leaves_entry", F_CANCEL_KEEPS_ENTRY},
    {"window_end_inside", F_WINDOW_END_INSIDE},
    {"start_not_rounded", F_START_NOT_ROUNDED},
    {"advance_rounds_up", F_ADVANCE_ROUNDS_UP},
    {"bucket_rounds_up", F_BUCKET_ROUNDS_UP},
};

typedef struct Link { struct Link *prev, *next; } Link;
typedef struct Bucket Bucket;
typedef struct Core Core;

typedef struct {
    PyObject_HEAD
    Link link;              /* in its bucket's ring while LINKED */
    Bucket *bucket;
    long long delay_ms;
    long long expiration_ms;
    int state;
} Task;

#define TASK_OF(l) ((Task *)((char *)(l) - offsetof(Task, link)))

struct Bucket {
    Link ring;              /* sentinel: ring.next is the head, ring.prev the tail */
    long long expiration_ms; /* -1 when unused */
    Core *core;
    char used;              /* only the requeued_only_when_new fault reads it */
};

typedef struct Wheel {
    i128 tick, interval, current; /* wide: upper levels' ticks and intervals pass Long.MAX_VALUE */
    Py_ssize_t size;
    Bucket *buckets;
    struct Wheel *overflow;
} Wheel;

typedef struct { long long expiration; unsigned long long seq; Bucket *bucket; } HeapItem;

struct Core {
    PyObject_HEAD
    Wheel *wheel;
    HeapItem *heap;
    Py_ssize_t heap_len, heap_cap;
    unsigned long long offers;
    Py_ssize_t count;       /* entries in buckets at every level: Kafka's taskCounter */
    int faults;
    int waiters;            /* reaper threads waiting for a bucket (set by the Python side) */
    char closed;
    PyObject *virtual_clock; /* a VirtualClock whose now_ms is read directly, or NULL */
    PyObject *clock;         /* the clock callable */
    PyObject *on_error;
    PyObject *hand_off;      /* executor submit, or NULL: run expired tasks inline */
    PyObject *report;        /* last resort when on_error itself raises, or NULL: re-raise to the caller */
    PyObject *dict;
    PyObject *weakrefs;
};

static PyTypeObject TaskType, CoreType;
static PyObject *str_run, *str_now_ms, *str_advance_to, *str_wake, *str_timer_domain_error, *str_acquire,
    *str_release, *str_on_complete, *str_on_expiration, *str_try_complete, *str_force_complete, *str_safe_try_complete,
    *str_safe_try_complete_or_else, *str_add_to_timer, *str_remove_key_if_empty,
    *str_completed, *str_checked_keys, *str_cancel, *str_advance_clock;

/* ------------------------------------------------------------------------------------------------------------ */
/* Buckets                                                                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

static void ring_init(Link *ring) { ring->next = ring->prev = ring; }

static void bucket_link(Bucket *b, Task *t)
{
    Link *tail = b->ring.prev;
    t->link.prev = tail;
    t->link.next = &b->ring;
    tail->next = &t->link;
    b->ring.prev = &t->link;
    t->bucket = b;
    b->core->count++;
}

static void bucket_unlink(Task *t)
{
    t->link.prev->next = t->link.next;
    t->link.next->prev = t->link.prev;
    t->link.prev = t->link.next = NULL;
    t->bucket->core->count--;
    t->bucket = NULL;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* The delay queue                                                                                                */
/* ------------------------------------------------------------------------------------------------------------ */

static int heap_less(const HeapItem *a, const HeapItem *b)
{
    return a->expiration < b->expiration || (a->expiration == b->expiration && a->seq < b->seq);
}

/* Queue ``b`` at its expiration; returns 2 if it became the earliest, 1 otherwise, -1 on memory error. */
static int heap_offer(Core *c, Bucket *b)
{
    if (c->heap_len == c->heap_cap) {
        Py_ssize_t cap = c->heap_cap ? c->heap_cap * 2 : 64;
        HeapItem *grown = PyMem_Realloc(c->heap, cap * sizeof(HeapItem));
        if (grown == NULL) { PyErr_NoMemory(); return -1; }
        c->heap = grown;
        c->heap_cap = cap;
    }
    HeapItem item = {b->expiration_ms, c->offers++, b};
    Py_ssize_t i = c->heap_len++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!heap_less(&item, &c->heap[parent])) break;
        c->heap[i] = c->heap[parent];
        i = parent;
    }
    c->heap[i] = item;
    return i == 0 ? 2 : 1;
}

static Bucket *heap_pop(Core *c)
{
    Bucket *top = c->heap[0].bucket;
    HeapItem last = c->heap[--c->heap_len];
    Py_ssize_t i = 0, n = c->heap_len;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && heap_less(&c->heap[child + 1], &c->heap[child])) child++;
        if (!heap_less(&c->heap[child], &last)) break;
        c->heap[i] = c->heap[child];
        i = child;
    }
    if (n) c->heap[i] = last;
    return top;
}

/* Whether a bucket is due at ``now``, as the queue reads the clock. */
static int head_due(Core *c, long long now)
{
    i128 seen = now;
    if (c->faults & F_LATE_BY_ONE_MS) seen -= 1;
    if (c->faults & F_MICROSECOND_QUEUE) seen *= 1000;
    return c->heap_len && c->heap[0].expiration <= seen;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Wheels                                                                                                         */
/* ------------------------------------------------------------------------------------------------------------ */

static Wheel *wheel_new(Core *c, i128 tick, Py_ssize_t size, i128 start)
{
    Wheel *w = PyMem_Calloc(1, sizeof(Wheel));
    Bucket *buckets = PyMem_Calloc(size, sizeof(Bucket));
    if (w == NULL || buckets == NULL) {
        PyMem_Free(w);
        PyMem_Free(buckets);
        PyErr_NoMemory();
        return NULL;
    }
    w->tick = tick;
    w->size = size;
    w->interval = tick * size;
    w->current = (c->faults & F_START_NOT_ROUNDED) ? start : start - start % tick;
    w->buckets = buckets;
    for (Py_ssize_t i = 0; i < size; i++) {
        ring_init(&buckets[i].ring);
        buckets[i].expiration_ms = -1;
        buckets[i].core = c;
    }
    return w;
}

/* Place a task that is in no bucket (the caller's reference moves into the bucket): 1 placed, 2 placed in a bucket
 * that became the earliest queued, 0 due now (the caller runs it), -1 error. */
static int wheel_add(Core *c, Task *t)
{
    Wheel *w = c->wheel;
    i128 expiration = t->expiration_ms;
    if (expiration < w->current + w->tick) return 0;
    if ((c->faults & F_EXPIRED_AT_NEXT_TICK) && expiration == w->current + w->tick) return 0;
    /* Kafka recurses and re-tests "expired" on every level; an overflow wheel's time never passes the time of the
     * wheel below it, so the test cannot succeed above the first level. */
    while (expiration >= w->current + w->interval
           && !((c->faults & F_WINDOW_END_INSIDE) && expiration == w->current + w->interval)) {
        if (w->overflow == NULL) {
            /* created on first use: tick = this wheel's interval, start = this wheel's current time */
            if ((w->overflow = wheel_new(c, w->interval, w->size, w->current)) == NULL) return -1;
            if (c->faults & F_OVERFLOW_STARTS_AHEAD) w->overflow->current += w->interval;
        }
        w = w->overflow;
    }
    i128 virtual_id = (c->faults & F_BUCKET_ROUNDS_UP) ? (expiration + w->tick - 1) / w->tick : expiration / w->tick;
    Py_ssize_t slot = (Py_ssize_t)(virtual_id % w->size);
    if (c->faults & F_BUCKET_OFF_BY_ONE) slot = (slot + 1) % w->size;
    Bucket *b = &w->buckets[slot];
    bucket_link(b, t);
    t->state = LINKED;
    long long bucket_expiration = (long long)(virtual_id * w->tick);
    int changed = b->expiration_ms != bucket_expiration; /* only then is the bucket (re)queued */
    b->expiration_ms = bucket_expiration;
    if (c->faults & F_REQUEUED_ON_EVERY_ADD) changed = 1;
    if (c->faults & F_QUEUED_ONLY_WHEN_NEW) {
        changed = changed && !b->used;
        b->used = 1;
    }
    return changed ? heap_offer(c, b) : 1;
}

static void wheel_advance(Core *c, Wheel *w, i128 time_ms)
{
    for (; w != NULL && time_ms >= w->current + w->tick; w = w->overflow) {
        w->current = (c->faults & F_ADVANCE_ROUNDS_UP) ? (time_ms + w->tick - 1) / w->tick * w->tick
                                                       : time_ms - time_ms % w->tick;
        time_ms = w->current;
    }
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Running expired tasks                                                                                          */
/* ------------------------------------------------------------------------------------------------------------ */

/* The current exception, normalized, with its traceback attached; the error indicator is cleared. */
static PyObject *fetch_error(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

/* Report the current exception, raised by user code on behalf of ``source``, to on_error. If on_error raises too:
 * with a ``report`` hook, that gets it (and if even that fails, it is printed as unraisable); without one, the
 * first such exception is kept in *pending for the caller to raise once the batch is done. */
static void report_error(Core *c, PyObject *source, PyObject **pending)
{
    PyObject *error = fetch_error();
    PyObject *result = PyObject_CallFunctionObjArgs(c->on_error, error ? error : Py_None, source, NULL);
    Py_XDECREF(error);
    if (result != NULL) { Py_DECREF(result); return; }
    if (c->report != NULL && c->report != Py_None) {
        PyObject *hook_error = fetch_error();
        result = PyObject_CallFunctionObjArgs(c->report, hook_error ? hook_error : Py_None, source, NULL);
        Py_XDECREF(hook_error);
        if (result == NULL) PyErr_WriteUnraisable(c->report);
        Py_XDECREF(result);
    } else if (*pending == NULL) {
        *pending = fetch_error();
    } else {
        PyErr_Clear();
    }
}

/* Run the tasks of ``batch`` still EXPIRED, in order; each failure goes to report_error and the batch goes on.
 * Returns -1 with an exception set if on_error raised and there is no report hook. */
static int run_batch(Core *c, PyObject *batch)
{
    PyObject *pending = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        Task *t = (Task *)PyList_GET_ITEM(batch, i);
        if (t->state != EXPIRED) continue; /* cancelled or re-added since the hand-off */
        t->state = DONE;
        Py_INCREF(t);
        PyObject *result = PyObject_CallMethodNoArgs((PyObject *)t, str_run);
        if (result == NULL) report_error(c, (PyObject *)t, &pending);
        Py_XDECREF(result);
        Py_DECREF(t);
    }
    if (pending != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(pending), pending);
        Py_DECREF(pending);
        return -1;
    }
    return 0;
}

static int hand_off(Core *c, PyObject *batch)
{
    if (c->hand_off == NULL || c->hand_off == Py_None) return run_batch(c, batch);
    PyObject *result = PyObject_CallOneArg(c->hand_off, batch);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* TimerTask                                                                                                      */
/* ------------------------------------------------------------------------------------------------------------ */

static int set_delay(Task *self, PyObject *delay)
{
    if (!PyLong_Check(delay) || PyBool_Check(delay)) {
        PyErr_Format(PyExc_TypeError, "delay_ms must be an int, got %R", delay);
        return -1;
    }
    long long value = PyLong_AsLongLong(delay);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "delay_ms must fit a Java long, got %R", delay);
        return -1;
    }
    if (self->state == LINKED) {
        PyErr_SetString(PyExc_RuntimeError, "a pending task cannot be re-initialized");
        return -1;
    }
    self->delay_ms = value;
    return 0;
}

static int task_init(Task *self, PyObject *args, PyObject *kwds)
{
    PyObject *delay;
    static char *kwlist[] = {"delay_ms", NULL};
    if (kwds == NULL && PyTuple_GET_SIZE(args) == 1) return set_delay(self, PyTuple_GET_ITEM(args, 0));
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:TimerTask", kwlist, &delay)) return -1;
    return set_delay(self, delay);
}

/* Take the task out of its timer; the reference the timer held is returned to the caller to drop once the timer is
 * consistent (NULL if it held none). */
static Task *task_detach(Task *t)
{
    if (t->bucket == NULL) {
        t->state = IDLE;
        return NULL;
    }
    if (t->bucket->core->faults & F_CANCEL_KEEPS_ENTRY) {
        t->state = IDLE; /* forgotten but still linked and counted: dropped when its bucket is flushed */
        return NULL;
    }
    bucket_unlink(t);
    t->state = IDLE;
    return t;
}

static PyObject *task_cancel(Task *self, PyObject *unused)
{
    Py_XDECREF(task_detach(self));
    Py_RETURN_NONE;
}

static PyObject *task_run(Task *self, PyObject *unused)
{
    PyErr_SetString(PyExc_NotImplementedError, "TimerTask subclasses define run()");
    return NULL;
}

static PyObject *task_get_scheduled(Task *self, void *closure) { return PyBool_FromLong(self->state == LINKED); }

static PyObject *task_get_expiration(Task *self, void *closure)
{
    if (self->state == IDLE) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->expiration_ms);
}

static void task_dealloc(Task *self)
{
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef task_methods[] = {
    {"cancel", (PyCFunction)task_cancel, METH_NOARGS, "Take the task out of its timer (O(1)); a task that is not "
     "pending is left as it is, except that a turn it was handed over for is skipped."},
    {"run", (PyCFunction)task_run, METH_NOARGS, "What the timer runs once the delay has passed; define it."},
    {NULL},
};

static PyMemberDef task_members[] = {
    {"delay_ms", T_LONGLONG, offsetof(Task, delay_ms), READONLY, "The delay, in ms, counted from each add."},
    {NULL},
};

static PyGetSetDef task_getset[] = {
    {"scheduled", (getter)task_get_scheduled, NULL, "Whether the task is in a timer's bucket (pending).", NULL},
    {"expiration_ms", (getter)task_get_expiration, NULL,
     "The expiration of the task's current scheduling (None if it was never added or was cancelled).", NULL},
    {NULL},
};

static PyTypeObject TaskType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kpurgatory.impl._core.TimerTask",
    .tp_doc = "Something the timer runs once delay_ms has passed; subclasses define run(). An intrusive node: "
              "scheduling it allocates nothing.",
    .tp_basicsize = sizeof(Task),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)task_init,
    .tp_dealloc = (destructor)task_dealloc,
    .tp_methods = task_methods,
    .tp_members = task_members,
    .tp_getset = task_getset,
};

/* ------------------------------------------------------------------------------------------------------------ */
/* TimerCore: the wheels, the delay queue and the counter; the compiled SystemTimer's base                        */
/* ------------------------------------------------------------------------------------------------------------ */

static int is_virtual(Core *c) { return c->virtual_clock != NULL && c->virtual_clock != Py_None; }

static long long read_clock(Core *c, int *ok)
{
    PyObject *now = is_virtual(c) ? PyObject_GetAttr(c->virtual_clock, str_now_ms)
                                             : PyObject_CallNoArgs(c->clock);
    *ok = 0;
    if (now == NULL) return 0;
    long long value = PyLong_AsLongLong(now);
    Py_DECREF(now);
    if (value == -1 && PyErr_Occurred()) return 0;
    *ok = 1;
    return value;
}

static int core_ready(Core *c)
{
    if (c->wheel == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the timer core is not set up");
        return 0;
    }
    return 1;
}

static PyObject *core_setup(Core *self, PyObject *args, PyObject *kwds)
{
    long long tick, size, start;
    int faults = 0;
    static char *kwlist[] = {"tick_ms", "wheel_size", "start_ms", "faults", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LLL|i:_setup_core", kwlist, &tick, &size, &start, &faults))
        return NULL;
    if (self->wheel != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the timer core is already set up");
        return NULL;
    }
    self->faults = faults;
    self->wheel = wheel_new(self, tick, (Py_ssize_t)size, start);
    if (self->wheel == NULL) return NULL;
    Py_RETURN_NONE;
}

static PyObject *domain_error(const char *code, PyObject *message)
{
    PyObject *module = PyImport_ImportModule("kpurgatory.impl.timer");
    if (module == NULL) return NULL;
    PyObject *cls = PyObject_GetAttr(module, str_timer_domain_error);
    Py_DECREF(module);
    if (cls == NULL) return NULL;
    PyObject *error = PyObject_CallFunction(cls, "sO", code, message);
    Py_DECREF(cls);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    return NULL;
}

/* Schedule ``t`` at now + delay. Returns -1 on error (raised), else 0. */
static int core_schedule(Core *c, Task *t)
{
    if (c->closed) {
        PyErr_SetString(PyExc_RuntimeError, "the timer is shut down");
        return -1;
    }
    int ok;
    long long now = read_clock(c, &ok);
    if (!ok) return -1;
    long long expiration;
    if (__builtin_add_overflow(now, t->delay_ms, &expiration)) {
        if (t->delay_ms < 0) {
            expiration = LLONG_MIN; /* below any time: due now */
        } else {
            PyObject *message = PyUnicode_FromFormat(
                "delay_ms=%lld at now=%lld gives an expiration > Long.MAX_VALUE (%lld)", t->delay_ms, now, LLONG_MAX);
            if (message != NULL) domain_error("delay_out_of_range", message);
            Py_XDECREF(message);
            return -1;
        }
    }
    /* --- atomic stretch: a task has at most one scheduling; the new one evicts the old (the reference moves) --- */
    if (t->bucket != NULL) bucket_unlink(t); /* linked even if forgotten (cancel_leaves_entry): evicted */
    else Py_INCREF(t);
    t->expiration_ms = expiration;
    int placed = wheel_add(c, t);
    if (placed == 0) t->state = EXPIRED;
    /* --- end of stretch: an expired task is EXPIRED and in no bucket, so allocating its batch now is safe --- */
    int result = 0;
    if (placed < 0) {
        t->state = IDLE;
        Py_DECREF(t);
        result = -1;
    } else if (placed == 0) {
        PyObject *batch = PyList_New(1); /* Kafka: taskExecutor.submit(task); the reference moves in */
        if (batch == NULL) {
            Py_DECREF(t);
            return -1;
        }
        PyList_SET_ITEM(batch, 0, (PyObject *)t);
        result = hand_off(c, batch);
        Py_DECREF(batch);
    } else if (placed == 2 && c->waiters > 0) { /* a new earliest bucket: the reaper's wait is too long now */
        PyObject *woken = PyObject_CallMethodNoArgs((PyObject *)c, str_wake);
        if (woken == NULL) result = -1;
        Py_XDECREF(woken);
    }
    return result;
}

static PyObject *core_add(Core *self, PyObject *task)
{
    if (!core_ready(self)) return NULL;
    if (!PyObject_TypeCheck(task, &TaskType)) {
        PyErr_Format(PyExc_TypeError, "expected a TimerTask of kpurgatory.impl's compiled core, got %R", task);
        return NULL;
    }
    if (core_schedule(self, (Task *)task) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Release every bucket due by the clock, earliest first, one stretch per bucket; returns whether any was. */
static int core_drain(Core *c)
{
    int released = 0;
    for (;;) {
        int ok;
        long long now = read_clock(c, &ok);
        if (!ok) return -1;
        if (!head_due(c, now)) return released; /* nothing due: no allocation at all */
        PyObject *batch = PyList_New(0);
        if (batch == NULL) return -1;
        /* --- atomic stretch: poll, advance the wheels, flush the bucket and re-insert its entries --- */
        if (!head_due(c, now)) { /* the allocation let another thread in */
            Py_DECREF(batch);
            return released;
        }
        Bucket *b = heap_pop(c);
        wheel_advance(c, c->wheel, b->expiration_ms);
        Link *link = b->ring.next;
        ring_init(&b->ring);
        b->expiration_ms = -1;
        int failed = 0, first = 1;
        while (link != &b->ring) {
            Task *t = TASK_OF(link);
            link = link->next;
            t->link.prev = t->link.next = NULL;
            t->bucket = NULL;
            c->count--;
            int placed;
            if (t->state != LINKED) {
                placed = 0; /* forgotten by a cancel (cancel_leaves_entry): skipped at its turn */
            } else if ((c->faults & F_FLUSH_HEAD_ONLY) && !first) {
                t->state = DONE;
                placed = 0;
            } else {
                placed = failed ? 0 : wheel_add(c, t);
                if (placed == 0) t->state = EXPIRED;
            }
            first = 0;
            if (placed < 0) {
                failed = 1;
                t->state = IDLE;
                placed = 0;
            }
            if (placed == 0) { /* the reference moves into the batch */
                if (PyList_Append(batch, (PyObject *)t) < 0) failed = 1;
                Py_DECREF(t);
            }
        }
        /* --- end of stretch --- */
        released = 1;
        if (!failed && PyList_GET_SIZE(batch) > 0) failed = hand_off(c, batch) < 0;
        Py_DECREF(batch);
        if (failed) return -1;
    }
}

static PyObject *core_drain_method(Core *self, PyObject *unused)
{
    if (!core_ready(self)) return NULL;
    int released = core_drain(self);
    if (released < 0) return NULL;
    return PyBool_FromLong(released);
}

static PyObject *core_advance_to(Core *self, PyObject *to_ms)
{
    if (!core_ready(self)) return NULL;
    if (!is_virtual(self)) {
        PyErr_SetString(PyExc_RuntimeError, "advance_to needs a VirtualClock; the real clock moves by itself");
        return NULL;
    }
    PyObject *moved = PyObject_CallMethodOneArg(self->virtual_clock, str_advance_to, to_ms);
    if (moved == NULL) return NULL;
    Py_DECREF(moved);
    int released = core_drain(self);
    if (released < 0) return NULL;
    return PyBool_FromLong(released);
}

static PyObject *core_run_expired(Core *self, PyObject *batch)
{
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "expected the list of a hand-off");
        return NULL;
    }
    if (run_batch(self, batch) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_claim(Core *self, PyObject *batch)
{
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "expected the list of a hand-off");
        return NULL;
    }
    PyObject *claimed = PyList_New(0);
    if (claimed == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        Task *t = (Task *)PyList_GET_ITEM(batch, i);
        if (t->state != EXPIRED) continue;
        t->state = DONE; /* one stretch: the executor's check-and-mark in run_batch cannot interleave */
        if (PyList_Append(claimed, (PyObject *)t) < 0) { Py_DECREF(claimed); return NULL; }
    }
    return claimed;
}

static PyObject *core_size(Core *self, PyObject *unused) { return PyLong_FromSsize_t(self->count); }

static PyObject *core_next_expiration(Core *self, PyObject *unused)
{
    if (!self->heap_len) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->heap[0].expiration);
}

static PyObject *core_queued_expirations(Core *self, PyObject *unused)
{
    PyObject *result = PyList_New(self->heap_len);
    if (result == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->heap_len; i++) {
        PyObject *value = PyLong_FromLongLong(self->heap[i].expiration);
        if (value == NULL) { Py_DECREF(result); return NULL; }
        PyList_SET_ITEM(result, i, value);
    }
    if (PyList_Sort(result) < 0) { Py_DECREF(result); return NULL; }
    return result;
}

static PyObject *pylong_from_i128(i128 value)
{
    if (value >= LLONG_MIN && value <= LLONG_MAX) return PyLong_FromLongLong((long long)value);
    unsigned char bytes[16];
    for (int i = 0; i < 16; i++) bytes[i] = (unsigned char)((unsigned __int128)value >> (8 * i));
    return _PyLong_FromByteArray(bytes, 16, 1, 1);
}

/* The tasks of a bucket, in order (a new list; every call runs in one stretch: it only reads). */
static PyObject *bucket_tasks(Bucket *b)
{
    PyObject *tasks = PyList_New(0);
    if (tasks == NULL) return NULL;
    for (Link *l = b->ring.next; l != &b->ring; l = l->next)
        if (PyList_Append(tasks, (PyObject *)TASK_OF(l)) < 0) { Py_DECREF(tasks); return NULL; }
    return tasks;
}

/* [(tick_ms, wheel_size, current_ms, [(slot, expiration_ms, [task, ...]), ...]), ...], finest level first. A read-out
 * for tests and adapters: building its lists may start a collection whose finalizers could let another thread
 * change the wheels between two buckets, so it is exact only when nothing else runs (as where the suite uses it). */
static PyObject *core_levels(Core *self, PyObject *unused)
{
    if (!core_ready(self)) return NULL;
    PyObject *levels = PyList_New(0);
    if (levels == NULL) return NULL;
    for (Wheel *w = self->wheel; w != NULL; w = w->overflow) {
        PyObject *buckets = PyList_New(0);
        if (buckets == NULL) goto error;
        for (Py_ssize_t slot = 0; slot < w->size; slot++) {
            Bucket *b = &w->buckets[slot];
            if (b->ring.next == &b->ring) continue;
            PyObject *tasks = bucket_tasks(b);
            PyObject *item = tasks ? Py_BuildValue("nLN", slot, b->expiration_ms, tasks) : NULL;
            if (item == NULL || PyList_Append(buckets, item) < 0) { Py_XDECREF(item); Py_DECREF(buckets); goto error; }
            Py_DECREF(item);
        }
        PyObject *level = Py_BuildValue("NnNN", pylong_from_i128(w->tick), w->size, pylong_from_i128(w->current),
                                        buckets);
        if (level == NULL || PyList_Append(levels, level) < 0) { Py_XDECREF(level); goto error; }
        Py_DECREF(level);
    }
    return levels;
error:
    Py_DECREF(levels);
    return NULL;
}

/* Every pending task, level by level and bucket by bucket; with ``drop`` the buckets are emptied (shutdown: the
 * tasks are DONE, neither run nor cancelled) and the queue cleared. */
static PyObject *core_collect(Core *self, int drop)
{
    if (!core_ready(self)) return NULL;
    PyObject *tasks = PyList_New(0);
    if (tasks == NULL) return NULL;
    int failed = 0;
    for (Wheel *w = self->wheel; w != NULL; w = w->overflow) {
        for (Py_ssize_t slot = 0; slot < w->size; slot++) {
            Bucket *b = &w->buckets[slot];
            Link *link = b->ring.next;
            while (link != &b->ring) {
                Task *t = TASK_OF(link);
                link = link->next;
                if (!failed && PyList_Append(tasks, (PyObject *)t) < 0) failed = 1;
                if (drop) {
                    t->link.prev = t->link.next = NULL;
                    t->bucket = NULL;
                    self->count--;
                    if (t->state == LINKED) t->state = DONE;
                    Py_DECREF(t); /* the list holds it, unless the append failed */
                }
            }
            if (drop) {
                ring_init(&b->ring);
                b->expiration_ms = -1;
            }
        }
    }
    if (drop) self->heap_len = 0;
    if (failed) { Py_DECREF(tasks); return NULL; }
    return tasks;
}

static PyObject *core_pending(Core *self, PyObject *unused) { return core_collect(self, 0); }

static PyObject *core_flush_all(Core *self, PyObject *unused)
{
    self->closed = 1;
    return core_collect(self, 1);
}

static int core_traverse(Core *self, visitproc visit, void *arg)
{
    for (Wheel *w = self->wheel; w != NULL; w = w->overflow)
        for (Py_ssize_t slot = 0; slot < w->size; slot++)
            for (Link *l = w->buckets[slot].ring.next; l != &w->buckets[slot].ring; l = l->next)
                Py_VISIT(TASK_OF(l));
    Py_VISIT(self->virtual_clock);
    Py_VISIT(self->clock);
    Py_VISIT(self->on_error);
    Py_VISIT(self->hand_off);
    Py_VISIT(self->report);
    Py_VISIT(self->dict);
    return 0;
}

static int core_clear(Core *self)
{
    if (self->wheel != NULL) {
        PyObject *dropped = core_collect(self, 1);
        if (dropped == NULL) PyErr_Clear();
        Py_XDECREF(dropped);
    }
    Py_CLEAR(self->virtual_clock);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->hand_off);
    Py_CLEAR(self->report);
    Py_CLEAR(self->dict);
    return 0;
}

static void core_dealloc(Core *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    core_clear(self);
    for (Wheel *w = self->wheel; w != NULL;) {
        Wheel *next = w->overflow;
        PyMem_Free(w->buckets);
        PyMem_Free(w);
        w = next;
    }
    PyMem_Free(self->heap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef core_methods[] = {
    {"_setup_core", (PyCFunction)(void (*)(void))core_setup, METH_VARARGS | METH_KEYWORDS,
     "Build the first wheel: tick_ms, wheel_size, start_ms (validated by the caller), faults."},
    {"add", (PyCFunction)core_add, METH_O,
     "Schedule the task at now + its delay; re-adding a pending task moves it (its deadline restarts)."},
    {"_drain", (PyCFunction)core_drain_method, METH_NOARGS,
     "Release every bucket due by the clock, earliest first; returns whether any bucket was released."},
    {"advance_to", (PyCFunction)core_advance_to, METH_O,
     "Virtual timers only: move the clock to to_ms and release everything due by then."},
    {"_run_expired", (PyCFunction)core_run_expired, METH_O,
     "Run a hand-off's tasks in order, skipping those cancelled or re-added since."},
    {"_claim", (PyCFunction)core_claim, METH_O,
     "The tasks of a hand-off not run yet, taken back so that the executor never runs them."},
    {"size", (PyCFunction)core_size, METH_NOARGS, "Entries currently in buckets, at any level (O(1))."},
    {"_next_expiration", (PyCFunction)core_next_expiration, METH_NOARGS, "The earliest queued expiration, or None."},
    {"queued_expirations", (PyCFunction)core_queued_expirations, METH_NOARGS,
     "The delay queue read-out: expirations of the queued buckets, sorted, duplicates kept."},
    {"_levels", (PyCFunction)core_levels, METH_NOARGS, "The wheels' contents, finest level first."},
    {"pending", (PyCFunction)core_pending, METH_NOARGS, "The pending tasks."},
    {"_flush_all", (PyCFunction)core_flush_all, METH_NOARGS,
     "Close the timer and drop every pending task (neither run nor cancelled); returns them."},
    {NULL},
};

static PyMemberDef core_members[] = {
    {"_virtual_clock", T_OBJECT, offsetof(Core, virtual_clock), 0, "A VirtualClock read directly, or None."},
    {"clock", T_OBJECT, offsetof(Core, clock), 0, "The clock: a callable returning ms."},
    {"on_error", T_OBJECT, offsetof(Core, on_error), 0, "on_error(error, source): user code failed."},
    {"_hand_off", T_OBJECT, offsetof(Core, hand_off), 0, "Executor submit for expired batches, or None: inline."},
    {"_report", T_OBJECT, offsetof(Core, report), 0, "Last resort when on_error raises, or None: re-raise."},
    {"_waiters", T_INT, offsetof(Core, waiters), 0, "Reaper threads waiting for a bucket to fall due."},
    {"_closed", T_BOOL, offsetof(Core, closed), 0, "Shut down: add refuses."},
    {NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kpurgatory.impl._core.TimerCore",
    .tp_doc = "The wheels, buckets, delay queue and counter of a SystemTimer (see kpurgatory.impl.compiled).",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_dictoffset = offsetof(Core, dict),
    .tp_weaklistoffset = offsetof(Core, weakrefs),
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Locks that wait without holding the GIL                                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

/* A lock is the id of the thread holding it (0: free). Taking a free lock is a test and a store in one stretch,
 * atomic under the GIL; a thread that finds it taken gives up the GIL and sleeps (1 us, doubling up to 1 ms) before
 * it looks again, so the holder can run and release it. Holders never wait for the GIL while holding one of these
 * in a way the waiter could block: waiters hold nothing. */
static void spin_wait(unsigned long *owner, unsigned long me)
{
    unsigned int pause_us = 1;
    while (*owner != 0) {
        Py_BEGIN_ALLOW_THREADS
        usleep(pause_us);
        Py_END_ALLOW_THREADS
        if (pause_us < 1000) pause_us *= 2;
    }
    *owner = me;
}

/* The op lock: reentrant, as Kafka's ReentrantLock. */
typedef struct {
    PyObject_HEAD
    unsigned long owner;
    long count;
} OpLock;

static PyTypeObject OpLockType;

static void oplock_acquire(OpLock *lock)
{
    unsigned long me = PyThread_get_thread_ident();
    if (lock->owner == me) { lock->count++; return; }
    if (lock->owner == 0) lock->owner = me;
    else spin_wait(&lock->owner, me);
    lock->count = 1;
}

static int oplock_release(OpLock *lock)
{
    if (lock->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release an op lock this thread does not hold");
        return -1;
    }
    if (--lock->count == 0) lock->owner = 0;
    return 0;
}

static PyObject *oplock_acquire_method(OpLock *self, PyObject *unused) { oplock_acquire(self); Py_RETURN_TRUE; }

static PyObject *oplock_release_method(OpLock *self, PyObject *unused)
{
    if (oplock_release(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *oplock_exit(OpLock *self, PyObject *args) { return oplock_release_method(self, NULL); }

static PyObject *oplock_locked(OpLock *self, PyObject *unused) { return PyBool_FromLong(self->owner != 0); }

static PyMethodDef oplock_methods[] = {
    {"acquire", (PyCFunction)oplock_acquire_method, METH_NOARGS, "Take the lock, waiting as long as it takes."},
    {"release", (PyCFunction)oplock_release_method, METH_NOARGS, "Release one level of the lock."},
    {"__enter__", (PyCFunction)oplock_acquire_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)oplock_exit, METH_VARARGS, NULL},
    {"locked", (PyCFunction)oplock_locked, METH_NOARGS, "Whether some thread holds it."},
    {NULL},
};

static PyTypeObject OpLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kpurgatory.impl._core.OpLock",
    .tp_doc = "A reentrant lock for one delayed operation (what DelayedOperation uses unless given a lock).",
    .tp_basicsize = sizeof(OpLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_methods = oplock_methods,
};

/* Any lock: an OpLock directly, anything else (a caller's threading lock) through acquire()/release(). */
static int lock_acquire(PyObject *lock)
{
    if (Py_TYPE(lock) == &OpLockType) { oplock_acquire((OpLock *)lock); return 0; }
    PyObject *result = PyObject_CallMethodNoArgs(lock, str_acquire);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* Release, keeping any exception already set (the release runs on the way out of a failed call too). */
static int lock_release(PyObject *lock)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    int status;
    if (Py_TYPE(lock) == &OpLockType) {
        status = oplock_release((OpLock *)lock);
    } else {
        PyObject *result = PyObject_CallMethodNoArgs(lock, str_release);
        status = result == NULL ? -1 : 0;
        Py_XDECREF(result);
    }
    if (type != NULL) {
        if (status < 0) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
        return -1;
    }
    return status;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* DelayedOperation                                                                                               */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct {
    Task task;
    char completed;
    PyObject *lock;
} Operation;

static PyTypeObject OperationType;
/* The C methods a Python subclass may override (the mutants do): when it does, the purgatory calls the override. */
static PyObject *op_safe_try_complete_impl, *op_safe_try_complete_or_else_impl;

static int overrides(PyObject *op, PyObject *name, PyObject *ours)
{
    return _PyType_Lookup(Py_TYPE(op), name) != ours;
}

/* While a controlled scheduler supplies impl's locks (kpurgatory.impl.sync), what makes an op's lock when the op is
 * given none: sync's factory of reentrant locks, called with the role "op"; NULL otherwise (the op gets an OpLock). */
static PyObject *op_lock_factory = NULL;

static PyObject *core_set_op_lock_factory(PyObject *module, PyObject *factory)
{
    if (factory != Py_None && !PyCallable_Check(factory)) {
        PyErr_SetString(PyExc_TypeError, "set_op_lock_factory takes a callable or None");
        return NULL;
    }
    Py_XSETREF(op_lock_factory, factory == Py_None ? NULL : Py_NewRef(factory));
    Py_RETURN_NONE;
}

static PyObject *make_op_lock(void)
{
    if (op_lock_factory == NULL) return PyType_GenericNew(&OpLockType, NULL, NULL);
    PyObject *role = PyUnicode_FromString("op");
    if (role == NULL) return NULL;
    PyObject *made = PyObject_CallOneArg(op_lock_factory, role);
    Py_DECREF(role);
    return made;
}

static int operation_init(Operation *self, PyObject *args, PyObject *kwds)
{
    PyObject *delay, *lock = Py_None;
    static char *kwlist[] = {"delay_ms", "lock", NULL};
    if (kwds == NULL && PyTuple_GET_SIZE(args) == 1) {
        delay = PyTuple_GET_ITEM(args, 0);
    } else if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:DelayedOperation", kwlist, &delay, &lock)) {
        return -1;
    }
    if (set_delay(&self->task, delay) < 0) return -1;
    self->completed = 0;
    PyObject *chosen = lock != Py_None ? Py_NewRef(lock) : make_op_lock();
    if (chosen == NULL) return -1;
    Py_XSETREF(self->lock, chosen);
    return 0;
}

static int operation_traverse(Operation *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lock);
    return 0;
}

static int operation_clear(Operation *self)
{
    Py_CLEAR(self->lock);
    return 0;
}

static void operation_dealloc(Operation *self)
{
    PyObject_GC_UnTrack(self);
    operation_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Complete the op if nobody has yet: the test and the set are one stretch, so exactly one caller gets 1 however many
 * threads race (try, check, expiry, force); that caller cancels the timeout and runs on_complete. */
static int force_complete(Operation *op)
{
    if (op->completed) return 0;
    op->completed = 1;
    Py_XDECREF(task_detach(&op->task));
    PyObject *result = PyObject_CallMethodNoArgs((PyObject *)op, str_on_complete);
    Py_XDECREF(result);
    return result == NULL ? -1 : 1;
}

static PyObject *operation_force_complete(Operation *self, PyObject *unused)
{
    int won = force_complete(self);
    return won < 0 ? NULL : PyBool_FromLong(won);
}

static PyObject *call_try_complete(PyObject *op) { return PyObject_CallMethodNoArgs(op, str_try_complete); }

/* Under the op lock: a completed op is not tried again (KAFKA-17848). */
static PyObject *safe_try_complete(Operation *op)
{
    if (lock_acquire(op->lock) < 0) return NULL;
    PyObject *result = op->completed ? Py_NewRef(Py_False) : call_try_complete((PyObject *)op);
    if (lock_release(op->lock) < 0) Py_CLEAR(result);
    return result;
}

static PyObject *operation_safe_try_complete(Operation *self, PyObject *unused) { return safe_try_complete(self); }

/* Under the op lock: try; if that fails run action (watch the keys) and try once more. */
static PyObject *operation_safe_try_complete_or_else(Operation *self, PyObject *action)
{
    if (lock_acquire(self->lock) < 0) return NULL;
    PyObject *result = call_try_complete((PyObject *)self);
    if (result != NULL) {
        int done = PyObject_IsTrue(result);
        if (done != 0) {
            if (done < 0) Py_CLEAR(result);
        } else {
            Py_DECREF(result);
            PyObject *acted = PyObject_CallNoArgs(action);
            result = acted == NULL ? NULL : call_try_complete((PyObject *)self);
            Py_XDECREF(acted);
        }
    }
    if (lock_release(self->lock) < 0) Py_CLEAR(result);
    return result;
}

/* The timer's expiry: complete (through force_complete, which a subclass may override) and only if that won, call
 * on_expiration. */
static PyObject *operation_run(Operation *self, PyObject *unused)
{
    PyObject *won = PyObject_CallMethodNoArgs((PyObject *)self, str_force_complete);
    if (won == NULL) return NULL;
    int truth = PyObject_IsTrue(won);
    Py_DECREF(won);
    if (truth < 0) return NULL;
    if (truth) return PyObject_CallMethodNoArgs((PyObject *)self, str_on_expiration);
    Py_RETURN_NONE;
}

static PyObject *operation_abstract(Operation *self, PyObject *unused)
{
    PyErr_SetString(PyExc_NotImplementedError, "DelayedOperation subclasses define try_complete, on_complete and "
                                               "on_expiration");
    return NULL;
}

static PyMethodDef operation_methods[] = {
    {"force_complete", (PyCFunction)operation_force_complete, METH_NOARGS,
     "Complete the op if nobody has yet: only the first caller gets True; it cancels the timeout and runs "
     "on_complete."},
    {"safe_try_complete", (PyCFunction)operation_safe_try_complete, METH_NOARGS,
     "Under the op lock: a completed op is not tried again (KAFKA-17848)."},
    {"safe_try_complete_or_else", (PyCFunction)operation_safe_try_complete_or_else, METH_O,
     "Under the op lock: try; if that fails run action (watch the keys) and try once more."},
    {"run", (PyCFunction)operation_run, METH_NOARGS,
     "The timer's expiry: complete, and only if that won, call on_expiration."},
    {"try_complete", (PyCFunction)operation_abstract, METH_NOARGS,
     "Return self.force_complete() if the condition holds, else False. Runs under lock."},
    {"on_complete", (PyCFunction)operation_abstract, METH_NOARGS,
     "Runs exactly once, in the thread whose force_complete won."},
    {"on_expiration", (PyCFunction)operation_abstract, METH_NOARGS, "Runs after on_complete when the timeout won."},
    {NULL},
};

static PyMemberDef operation_members[] = {
    {"completed", T_BOOL, offsetof(Operation, completed), 0, "Whether the op has completed (set once)."},
    {"lock", T_OBJECT, offsetof(Operation, lock), 0, "The lock try_complete runs under."},
    {NULL},
};

static PyTypeObject OperationType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kpurgatory.impl._core.DelayedOperation",
    .tp_doc = "An operation that completes exactly once: when try_complete finds its condition true, when it times "
              "out (on_complete then on_expiration), or when somebody calls force_complete. lock guards "
              "try_complete; pass one to share it with other state (Kafka's Optional<Lock> constructor).",
    .tp_basicsize = sizeof(Operation),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_base = &TaskType,
    .tp_init = (initproc)operation_init,
    .tp_dealloc = (destructor)operation_dealloc,
    .tp_traverse = (traverseproc)operation_traverse,
    .tp_clear = (inquiry)operation_clear,
    .tp_methods = operation_methods,
    .tp_members = operation_members,
};

/* ------------------------------------------------------------------------------------------------------------ */
/* PurgatoryCore: the shard map of watch lists, the estimate, the purge                                           */
/* ------------------------------------------------------------------------------------------------------------ */

/* Watch lists live in shards: a dict key -> list of ops, and its lock. A shard lock is held only to find, create,
 * append to, rebuild or drop a key's list, never while an op's callbacks run; code that can run Python there is a
 * key's __hash__/__eq__ (plain str, int, tuple keys run none) and the allocation of a list. A walk copies the list,
 * walks the copy without the shard lock, then rebuilds the list under it, keeping ops appended meanwhile. */
typedef struct { PyObject *map; unsigned long owner; } Shard;

typedef struct {
    PyObject_HEAD
    Shard *shards;
    Py_ssize_t shard_count;
    Py_ssize_t estimate;
    long long purge_interval;
    PyObject *timer;
    PyObject *on_error;
    char custom_add_to_timer, custom_remove_key;
    PyObject *dict;
    PyObject *weakrefs;
} Purgatory;

static PyTypeObject PurgatoryType;

static int shard_acquire(Shard *shard)
{
    unsigned long me = PyThread_get_thread_ident();
    if (shard->owner == 0) { shard->owner = me; return 0; }
    if (shard->owner == me) {
        PyErr_SetString(PyExc_RuntimeError, "a purgatory key's __hash__ or __eq__ called back into the purgatory");
        return -1;
    }
    spin_wait(&shard->owner, me);
    return 0;
}

static void shard_release(Shard *shard) { shard->owner = 0; }

static int purgatory_ready(Purgatory *p)
{
    if (p->shards == NULL || p->timer == NULL || !PyObject_TypeCheck(p->timer, &CoreType)) {
        PyErr_SetString(PyExc_RuntimeError, "the purgatory core is not set up over a compiled timer");
        return 0;
    }
    return 1;
}

/* Java's String.hashCode of a str key (31 * h + c over its UTF-16 code units, 32-bit), as its absolute value: a str
 * key's shard is Kafka's, Math.abs(key.hashCode() % shards), the same in every process (Python's str hash is salted),
 * so a checker told the layout can aim keys at every shard. */
static Py_hash_t java_string_hash(PyObject *key)
{
    int kind = PyUnicode_KIND(key);
    const void *data = PyUnicode_DATA(key);
    uint32_t h = 0;
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(key); i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) {  /* a surrogate pair in UTF-16 */
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            c = 0xDC00 + (c & 0x3FF);
        }
        h = 31 * h + c;
    }
    int32_t signed_h = (int32_t)h;
    return signed_h < 0 ? -(Py_hash_t)signed_h : (Py_hash_t)signed_h;
}

static Shard *shard_of(Purgatory *p, PyObject *key)
{
    if (PyUnicode_Check(key)) return &p->shards[(size_t)java_string_hash(key) % (size_t)p->shard_count];
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "purgatory keys must be hashable, got %R", key);
        }
        return NULL;
    }
    return &p->shards[(size_t)hash & (size_t)(p->shard_count - 1)];
}

static PyObject *purgatory_setup(Purgatory *self, PyObject *args)
{
    Py_ssize_t count;
    int custom_add_to_timer, custom_remove_key;
    if (!PyArg_ParseTuple(args, "npp:_setup_watchers", &count, &custom_add_to_timer, &custom_remove_key)) return NULL;
    if (self->shards != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the purgatory core is already set up");
        return NULL;
    }
    self->shards = PyMem_Calloc(count, sizeof(Shard));
    if (self->shards == NULL) return PyErr_NoMemory();
    self->shard_count = count;
    for (Py_ssize_t i = 0; i < count; i++)
        if ((self->shards[i].map = PyDict_New()) == NULL) return NULL;
    self->custom_add_to_timer = (char)custom_add_to_timer;
    self->custom_remove_key = (char)custom_remove_key;
    Py_RETURN_NONE;
}

/* Under the shard lock: drop the key only if the map still holds this very list and it is empty (Kafka's identity
 * rule: a concurrent cancel_for_key and re-watch may have put a new list there), or as a subclass's hook says. */
static int remove_key_if_empty(Purgatory *p, Shard *shard, PyObject *key, PyObject *operations)
{
    if (p->custom_remove_key) {
        PyObject *result = PyObject_CallMethodObjArgs((PyObject *)p, str_remove_key_if_empty, shard->map, key,
                                                      operations, NULL);
        Py_XDECREF(result);
        return result == NULL ? -1 : 0;
    }
    if (PyList_GET_SIZE(operations) != 0) return 0;
    PyObject *current = PyDict_GetItemWithError(shard->map, key);
    if (current == operations) return PyDict_DelItem(shard->map, key);
    return current == NULL && PyErr_Occurred() ? -1 : 0;
}

static int op_completed(PyObject *op)
{
    if (PyObject_TypeCheck(op, &OperationType)) return ((Operation *)op)->completed;
    PyObject *flag = PyObject_GetAttr(op, str_completed);
    if (flag == NULL) return -1;
    int truth = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return truth;
}

static int watch_all_keys(Purgatory *p, Operation *op, PyObject *keys)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        if (op->completed) break; /* KAFKA-18027: no new watches for an op that is already complete */
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        Shard *shard = shard_of(p, key);
        if (shard == NULL || shard_acquire(shard) < 0) return -1;
        /* Kafka's watchForOperation: find or create the key's list, append */
        PyObject *operations = PyDict_GetItemWithError(shard->map, key);
        int status;
        if (operations != NULL) {
            status = PyList_Append(operations, (PyObject *)op);
        } else if (PyErr_Occurred()) {
            status = -1;
        } else {
            PyObject *fresh = PyList_New(1);
            status = fresh == NULL ? -1 : 0;
            if (fresh != NULL) {
                PyList_SET_ITEM(fresh, 0, Py_NewRef(op));
                status = PyDict_SetItem(shard->map, key, fresh);
                Py_DECREF(fresh);
            }
        }
        shard_release(shard);
        if (status < 0) return -1;
    }
    p->estimate++; /* one stretch: no lost increment */
    return 0;
}

/* The action of safe_try_complete_or_else when a subclass overrides it: a callable that watches the keys. */
typedef struct {
    PyObject_HEAD
    Purgatory *purgatory;
    Operation *op;
    PyObject *keys;
    char watched;
} Watch;

static PyTypeObject WatchType;

static PyObject *watch_call(Watch *self, PyObject *args, PyObject *kwds)
{
    if (watch_all_keys(self->purgatory, self->op, self->keys) < 0) return NULL;
    self->watched = 1;
    Py_RETURN_NONE;
}

static void watch_dealloc(Watch *self)
{
    Py_XDECREF(self->purgatory);
    Py_XDECREF(self->op);
    Py_XDECREF(self->keys);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject WatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kpurgatory.impl._core.Watch",
    .tp_doc = "Watches an op under its keys when called (the action of safe_try_complete_or_else).",
    .tp_basicsize = sizeof(Watch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_call = (ternaryfunc)watch_call,
    .tp_dealloc = (destructor)watch_dealloc,
};

/* Put a watched op in the timer unless it completed; if it completed meanwhile (or expired on the spot by the add),
 * take it out again. */
static int add_to_timer(Purgatory *p, Operation *op)
{
    if (p->custom_add_to_timer) {
        PyObject *result = PyObject_CallMethodOneArg((PyObject *)p, str_add_to_timer, (PyObject *)op);
        Py_XDECREF(result);
        return result == NULL ? -1 : 0;
    }
    if (op->completed) return 0;
    if (core_schedule((Core *)p->timer, &op->task) < 0) return -1;
    if (op->completed) Py_XDECREF(task_detach(&op->task));
    return 0;
}

static PyObject *purgatory_add_to_timer(Purgatory *self, PyObject *op)
{
    if (!purgatory_ready(self)) return NULL;
    if (!PyObject_TypeCheck(op, &OperationType)) {
        PyErr_Format(PyExc_TypeError, "expected a DelayedOperation of the compiled core, got %R", op);
        return NULL;
    }
    if (op_completed(op)) Py_RETURN_NONE;
    if (core_schedule((Core *)self->timer, (Task *)op) < 0) return NULL;
    if (((Operation *)op)->completed) Py_XDECREF(task_detach((Task *)op));
    Py_RETURN_NONE;
}

/* The watch keys as a tuple: plain non-empty str keys in a tuple or list pass at once, anything else goes through
 * the pure-Python checked_keys for its clear errors. */
static PyObject *checked_keys(PyObject *keys)
{
    if ((PyTuple_CheckExact(keys) || PyList_CheckExact(keys)) && PySequence_Fast_GET_SIZE(keys) > 0) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
        PyObject **items = PySequence_Fast_ITEMS(keys);
        int plain = 1;
        for (Py_ssize_t i = 0; i < n && plain; i++)
            plain = PyUnicode_CheckExact(items[i]) && PyUnicode_GET_LENGTH(items[i]) > 0;
        if (plain) return PyTuple_CheckExact(keys) ? Py_NewRef(keys) : PyList_AsTuple(keys);
    }
    PyObject *module = PyImport_ImportModule("kpurgatory.impl.purgatory");
    if (module == NULL) return NULL;
    PyObject *result = PyObject_CallMethodOneArg(module, str_checked_keys, keys);
    Py_DECREF(module);
    return result;
}

static PyObject *purgatory_try_complete_else_watch(Purgatory *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "try_complete_else_watch(op, keys)");
        return NULL;
    }
    if (!purgatory_ready(self)) return NULL;
    if (!PyObject_TypeCheck(args[0], &OperationType)) {
        PyErr_Format(PyExc_TypeError, "expected a DelayedOperation of the compiled core, got %R", args[0]);
        return NULL;
    }
    Operation *op = (Operation *)args[0];
    PyObject *keys = checked_keys(args[1]);
    if (keys == NULL) return NULL;
    /* refuse before watching: no op left without a timeout */
    Core *timer = (Core *)self->timer;
    int ok;
    long long now = read_clock(timer, &ok), expiration;
    if (!ok) { Py_DECREF(keys); return NULL; }
    if (op->task.delay_ms > 0 && __builtin_add_overflow(now, op->task.delay_ms, &expiration)) {
        PyObject *message = PyUnicode_FromFormat("delay_ms=%lld at now=%lld gives an expiration > Long.MAX_VALUE "
                                                 "(%lld)", op->task.delay_ms, now, LLONG_MAX);
        if (message != NULL) domain_error("delay_out_of_range", message);
        Py_XDECREF(message);
        Py_DECREF(keys);
        return NULL;
    }
    PyObject *result;
    int watched;
    if (overrides((PyObject *)op, str_safe_try_complete_or_else, op_safe_try_complete_or_else_impl)) {
        Watch *action = PyObject_New(Watch, &WatchType);
        if (action == NULL) { Py_DECREF(keys); return NULL; }
        action->purgatory = (Purgatory *)Py_NewRef(self);
        action->op = (Operation *)Py_NewRef(op);
        action->keys = Py_NewRef(keys);
        action->watched = 0;
        result = PyObject_CallMethodOneArg((PyObject *)op, str_safe_try_complete_or_else, (PyObject *)action);
        watched = action->watched;
        Py_DECREF(action);
    } else { /* safe_try_complete_or_else, inline */
        watched = 0;
        if (lock_acquire(op->lock) < 0) { Py_DECREF(keys); return NULL; }
        result = call_try_complete((PyObject *)op);
        if (result != NULL) {
            int done = PyObject_IsTrue(result);
            if (done != 0) {
                if (done < 0) Py_CLEAR(result);
            } else {
                Py_CLEAR(result);
                if (watch_all_keys(self, op, keys) == 0) {
                    watched = 1;
                    result = call_try_complete((PyObject *)op);
                }
            }
        }
        if (lock_release(op->lock) < 0) Py_CLEAR(result);
    }
    Py_DECREF(keys);
    int truth = result == NULL ? -1 : PyObject_IsTrue(result);
    Py_XDECREF(result);
    if (truth < 0) {
        if (watched) { /* watched ops must be able to time out, whatever the caller's code did */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            if (add_to_timer(self, op) < 0) PyErr_Clear();
            PyErr_Restore(type, value, traceback);
        }
        return NULL;
    }
    if (truth) Py_RETURN_TRUE;
    if (add_to_timer(self, op) < 0) return NULL;
    Py_RETURN_FALSE;
}

/* ``operations`` less the entries at the removed positions of the walked ``snapshot`` (as Kafka's iterator removes
 * the entry it visits); entries appended during the walk follow the snapshot and are kept. If another thread
 * reshaped the walked prefix meanwhile, positions mean nothing any more: one occurrence per removed entry goes, by
 * identity. Runs under the shard lock and calls no Python code: the list is compacted in place. */
static int without_visited(PyObject *operations, PyObject **snapshot, Py_ssize_t prefix, char *removed)
{
    Py_ssize_t size = PyList_GET_SIZE(operations), kept = 0;
    int same = size >= prefix;
    for (Py_ssize_t i = 0; same && i < prefix; i++) same = PyList_GET_ITEM(operations, i) == snapshot[i];
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *op = PyList_GET_ITEM(operations, i);
        int drop = 0;
        if (same) {
            drop = i < prefix && removed[i];
        } else {
            for (Py_ssize_t j = 0; j < prefix && !drop; j++)
                if (removed[j] == 1 && snapshot[j] == op) removed[j] = drop = 2; /* 2: this occurrence is used */
        }
        if (!drop) { /* the list owns one reference per slot either way */
            PyObject *previous = PyList_GET_ITEM(operations, kept);
            Py_INCREF(op);
            PyList_SET_ITEM(operations, kept, op);
            Py_DECREF(previous); /* never the last reference: the snapshot holds every walked op */
            kept++;
        }
    }
    return kept == size ? 0 : PyList_SetSlice(operations, kept, size, NULL);
}

static PyObject *purgatory_check_and_complete(Purgatory *self, PyObject *key)
{
    if (!purgatory_ready(self)) return NULL;
    Shard *shard = shard_of(self, key);
    if (shard == NULL || shard_acquire(shard) < 0) return NULL;
    PyObject *operations = PyDict_GetItemWithError(shard->map, key);
    if (operations == NULL) {
        shard_release(shard);
        return PyErr_Occurred() ? NULL : PyLong_FromLong(0);
    }
    /* the snapshot: the walked ops, each held, and one removed flag per position; plain memory, no collection */
    Py_ssize_t n = PyList_GET_SIZE(operations), completed = 0;
    PyObject **snapshot = PyMem_Malloc((n ? n : 1) * (sizeof(PyObject *) + 1));
    if (snapshot == NULL) {
        shard_release(shard);
        return PyErr_NoMemory();
    }
    char *removed = (char *)(snapshot + (n ? n : 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        snapshot[i] = Py_NewRef(PyList_GET_ITEM(operations, i));
        removed[i] = 0;
    }
    Py_INCREF(operations);
    shard_release(shard);
    int any_removed = 0, failed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = snapshot[i];
        int done = op_completed(op);
        if (done < 0) { failed = 1; break; }
        if (!done) {
            PyObject *result = PyObject_TypeCheck(op, &OperationType)
                    && !overrides(op, str_safe_try_complete, op_safe_try_complete_impl)
                ? safe_try_complete((Operation *)op) : PyObject_CallMethodNoArgs(op, str_safe_try_complete);
            int won = result == NULL ? -1 : PyObject_IsTrue(result);
            Py_XDECREF(result);
            if (won > 0) completed++;
            if (won < 0) { /* see "Errors in user code": reported, and the walk goes on */
                PyObject *error = fetch_error();
                PyObject *reported = PyObject_CallFunctionObjArgs(self->on_error, error ? error : Py_None, op, NULL);
                Py_XDECREF(error);
                if (reported == NULL) { failed = 1; break; }
                Py_DECREF(reported);
            }
            done = op_completed(op);
            if (done < 0) { failed = 1; break; }
            if (!done) continue;
        }
        removed[i] = 1;
        any_removed = 1;
    }
    if (!failed && (any_removed || n == 0)) {
        if (shard_acquire(shard) < 0) {
            failed = 1;
        } else {
            if (any_removed && without_visited(operations, snapshot, n, removed) < 0) failed = 1;
            if (!failed && remove_key_if_empty(self, shard, key, operations) < 0) failed = 1;
            shard_release(shard);
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(snapshot[i]);
    PyMem_Free(snapshot);
    Py_DECREF(operations);
    return failed ? NULL : PyLong_FromSsize_t(completed);
}

static PyObject *purgatory_cancel_for_key(Purgatory *self, PyObject *key)
{
    if (!purgatory_ready(self)) return NULL;
    Shard *shard = shard_of(self, key);
    if (shard == NULL || shard_acquire(shard) < 0) return NULL;
    PyObject *operations = PyDict_GetItemWithError(shard->map, key);
    int failed = 0;
    if (operations != NULL) {
        Py_INCREF(operations);
        failed = PyDict_DelItem(shard->map, key) < 0;
    }
    shard_release(shard);
    if (failed || (operations == NULL && PyErr_Occurred())) { Py_XDECREF(operations); return NULL; }
    if (operations == NULL) return PyList_New(0);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(operations); i++) {
        PyObject *op = PyList_GET_ITEM(operations, i);
        if (PyObject_TypeCheck(op, &TaskType)) {
            Py_XDECREF(task_detach((Task *)op));
        } else {
            PyObject *result = PyObject_CallMethodNoArgs(op, str_cancel);
            if (result == NULL) { Py_DECREF(operations); return NULL; }
            Py_DECREF(result);
        }
    }
    return operations;
}

static PyObject *purgatory_watched(Purgatory *self, PyObject *unused)
{
    if (!purgatory_ready(self)) return NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < self->shard_count; i++) {
        Shard *shard = &self->shards[i];
        if (shard_acquire(shard) < 0) return NULL;
        Py_ssize_t position = 0;
        PyObject *key, *operations;
        while (PyDict_Next(shard->map, &position, &key, &operations)) total += PyList_GET_SIZE(operations);
        shard_release(shard);
    }
    return PyLong_FromSsize_t(total);
}

static PyObject *purgatory_watcher_keys(Purgatory *self, PyObject *unused)
{
    if (!purgatory_ready(self)) return NULL;
    PyObject *keys = PyList_New(0);
    if (keys == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->shard_count; i++) {
        Shard *shard = &self->shards[i];
        if (shard_acquire(shard) < 0) { Py_DECREF(keys); return NULL; }
        Py_ssize_t position = 0;
        PyObject *key, *operations;
        int failed = 0;
        while (!failed && PyDict_Next(shard->map, &position, &key, &operations)) failed = PyList_Append(keys, key) < 0;
        shard_release(shard);
        if (failed) { Py_DECREF(keys); return NULL; }
    }
    if (PyList_Sort(keys) < 0) { Py_DECREF(keys); return NULL; }
    return keys;
}

/* The purge sweep: drop completed ops from every list, and the lists left empty. */
static Py_ssize_t purge_completed(Purgatory *p)
{
    Py_ssize_t purged = 0;
    for (Py_ssize_t i = 0; i < p->shard_count; i++) {
        Shard *shard = &p->shards[i];
        if (shard_acquire(shard) < 0) return -1;
        PyObject *items = PyDict_Items(shard->map);
        int failed = items == NULL;
        for (Py_ssize_t j = 0; !failed && j < PyList_GET_SIZE(items); j++) {
            PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(items, j), 0);
            PyObject *operations = PyTuple_GET_ITEM(PyList_GET_ITEM(items, j), 1);
            Py_ssize_t size = PyList_GET_SIZE(operations), kept = 0;
            for (Py_ssize_t k = 0; k < size; k++) {
                PyObject *op = PyList_GET_ITEM(operations, k);
                int done = op_completed(op);
                if (done < 0) { failed = 1; break; }
                if (!done) { /* compact in place: the list owns one reference per slot either way */
                    PyObject *previous = PyList_GET_ITEM(operations, kept);
                    Py_INCREF(op);
                    PyList_SET_ITEM(operations, kept, op);
                    Py_DECREF(previous);
                    kept++;
                }
            }
            if (failed) break;
            if (kept != size) {
                purged += size - kept;
                if (PyList_SetSlice(operations, kept, size, NULL) < 0) { failed = 1; break; }
            }
            if (remove_key_if_empty(p, shard, key, operations) < 0) failed = 1;
        }
        Py_XDECREF(items);
        shard_release(shard);
        if (failed) return -1;
    }
    return purged;
}

static PyObject *purgatory_purge_completed(Purgatory *self, PyObject *unused)
{
    if (!purgatory_ready(self)) return NULL;
    Py_ssize_t purged = purge_completed(self);
    return purged < 0 ? NULL : PyLong_FromSsize_t(purged);
}

/* Release the due timer buckets (waiting up to timeout_ms for one on a real clock), then purge if more than
 * purge_interval operations are estimated gone from the timer. Returns how many watch-list entries the purge removed,
 * or None when no purge was due. */
static PyObject *purgatory_advance_clock(Purgatory *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!purgatory_ready(self)) return NULL;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "advance_clock(timeout_ms=0)");
        return NULL;
    }
    Core *timer = (Core *)self->timer;
    int waits = nargs == 1 ? PyObject_IsTrue(args[0]) : 0;
    if (waits < 0) return NULL;
    if (waits) {
        PyObject *released = PyObject_CallMethodOneArg(self->timer, str_advance_clock, args[0]);
        if (released == NULL) return NULL;
        Py_DECREF(released);
    } else if (core_drain(timer) < 0) {
        return NULL;
    }
    if ((long long)(self->estimate - timer->count) <= self->purge_interval) Py_RETURN_NONE;
    self->estimate = timer->count;
    Py_ssize_t purged = purge_completed(self);
    return purged < 0 ? NULL : PyLong_FromSsize_t(purged);
}

static PyObject *purgatory_advance_to(Purgatory *self, PyObject *to_ms)
{
    if (!purgatory_ready(self)) return NULL;
    Core *timer = (Core *)self->timer;
    if (!is_virtual(timer)) {
        PyErr_SetString(PyExc_RuntimeError, "advance_to needs a virtual timer; the real clock moves by itself");
        return NULL;
    }
    PyObject *moved = PyObject_CallMethodOneArg(timer->virtual_clock, str_advance_to, to_ms);
    if (moved == NULL) return NULL;
    Py_DECREF(moved);
    return PyObject_CallMethodNoArgs((PyObject *)self, str_advance_clock); /* a subclass may override it */
}

static int purgatory_traverse(Purgatory *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; self->shards != NULL && i < self->shard_count; i++) Py_VISIT(self->shards[i].map);
    Py_VISIT(self->timer);
    Py_VISIT(self->on_error);
    Py_VISIT(self->dict);
    return 0;
}

static int purgatory_clear(Purgatory *self)
{
    for (Py_ssize_t i = 0; self->shards != NULL && i < self->shard_count; i++) Py_CLEAR(self->shards[i].map);
    Py_CLEAR(self->timer);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->dict);
    return 0;
}

static void purgatory_dealloc(Purgatory *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    purgatory_clear(self);
    PyMem_Free(self->shards);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef purgatory_methods[] = {
    {"_setup_watchers", (PyCFunction)purgatory_setup, METH_VARARGS,
     "Make the shards (a power of two); say whether a subclass overrides _add_to_timer or _remove_key_if_empty."},
    {"try_complete_else_watch", (PyCFunction)(void (*)(void))purgatory_try_complete_else_watch, METH_FASTCALL,
     "Try to complete op; failing that, watch it under every key, try again, and put it in the timer. Returns True "
     "only when one of this call's own tries completed the op."},
    {"_add_to_timer", (PyCFunction)purgatory_add_to_timer, METH_O,
     "Put a watched op in the timer unless it completed (and out again if it completed meanwhile)."},
    {"check_and_complete", (PyCFunction)purgatory_check_and_complete, METH_O,
     "Walk the key's list in order: drop ops already completed, try the others, drop the ones that complete. Returns "
     "how many ops this call completed; an emptied list is removed."},
    {"cancel_for_key", (PyCFunction)purgatory_cancel_for_key, METH_O,
     "Remove the key's whole list and cancel each op's timeout; returns the list (stale entries and duplicates "
     "included)."},
    {"watched", (PyCFunction)purgatory_watched, METH_NOARGS,
     "Entries over all watch lists: an op once per key (and per duplicate), completed ones included."},
    {"watcher_keys", (PyCFunction)purgatory_watcher_keys, METH_NOARGS, "The keys that have a watch list, sorted."},
    {"purge_completed", (PyCFunction)purgatory_purge_completed, METH_NOARGS,
     "Drop completed ops from every watch list; returns how many entries went."},
    {"advance_to", (PyCFunction)purgatory_advance_to, METH_O,
     "Virtual timers only: move the clock to to_ms, then advance_clock."},
    {"advance_clock", (PyCFunction)(void (*)(void))purgatory_advance_clock, METH_FASTCALL,
     "Release the due timer buckets, then purge if more than purge_interval operations are estimated gone."},
    {NULL},
};

static PyMemberDef purgatory_members[] = {
    {"estimated_total_operations", T_PYSSIZET, offsetof(Purgatory, estimate), 0,
     "Incremented once per watch that reaches the watch phase, reset to the timer's size by a purge."},
    {"purge_interval", T_LONGLONG, offsetof(Purgatory, purge_interval), 0, "The purge rule's interval."},
    {"timer", T_OBJECT, offsetof(Purgatory, timer), 0, "The compiled SystemTimer."},
    {"on_error", T_OBJECT, offsetof(Purgatory, on_error), 0, "on_error(error, op): user code failed in a walk."},
    {NULL},
};

static PyTypeObject PurgatoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kpurgatory.impl._core.PurgatoryCore",
    .tp_doc = "The watch lists, the estimate and the purge of a DelayedOperationPurgatory (kpurgatory.impl.compiled).",
    .tp_basicsize = sizeof(Purgatory),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)purgatory_dealloc,
    .tp_traverse = (traverseproc)purgatory_traverse,
    .tp_clear = (inquiry)purgatory_clear,
    .tp_methods = purgatory_methods,
    .tp_members = purgatory_members,
    .tp_dictoffset = offsetof(Purgatory, dict),
    .tp_weaklistoffset = offsetof(Purgatory, weakrefs),
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Module                                                                                                         */
/* ------------------------------------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"set_op_lock_factory", core_set_op_lock_factory, METH_O,
     "What makes the lock of an op given none (None: an OpLock); kpurgatory.impl.sync sets it for a controller."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "kpurgatory.impl._core",
    "The compiled core of kpurgatory.impl: timer tasks, buckets, wheels, delay queue (see kpurgatory.impl.compiled).",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    if ((str_run = PyUnicode_InternFromString("run")) == NULL) return NULL;
    if ((str_now_ms = PyUnicode_InternFromString("now_ms")) == NULL) return NULL;
    if ((str_advance_to = PyUnicode_InternFromString("advance_to")) == NULL) return NULL;
    if ((str_wake = PyUnicode_InternFromString("_wake")) == NULL) return NULL;
    if ((str_timer_domain_error = PyUnicode_InternFromString("TimerDomainError")) == NULL) return NULL;
    static const struct { PyObject **target; const char *text; } NAMES[] = {
        {&str_acquire, "acquire"}, {&str_release, "release"}, {&str_on_complete, "on_complete"},
        {&str_on_expiration, "on_expiration"}, {&str_try_complete, "try_complete"},
        {&str_force_complete, "force_complete"}, {&str_safe_try_complete, "safe_try_complete"},
        {&str_safe_try_complete_or_else, "safe_try_complete_or_else"}, {&str_add_to_timer, "_add_to_timer"},
        {&str_remove_key_if_empty, "_remove_key_if_empty"},
        {&str_completed, "completed"}, {&str_checked_keys, "checked_keys"}, {&str_cancel, "cancel"},
        {&str_advance_clock, "advance_clock"},
    };
    for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
        if ((*NAMES[i].target = PyUnicode_InternFromString(NAMES[i].text)) == NULL) return NULL;
    if (PyType_Ready(&TaskType) < 0 || PyType_Ready(&CoreType) < 0 || PyType_Ready(&OpLockType) < 0
        || PyType_Ready(&OperationType) < 0 || PyType_Ready(&WatchType) < 0 || PyType_Ready(&PurgatoryType) < 0)
        return NULL;
    op_safe_try_complete_impl = PyDict_GetItem(OperationType.tp_dict, str_safe_try_complete);
    op_safe_try_complete_or_else_impl = PyDict_GetItem(OperationType.tp_dict, str_safe_try_complete_or_else);

    PyObject *module = PyModule_Create(&core_module);
    if (module == NULL) return NULL;
    PyObject *faults = PyDict_New();
    if (faults == NULL) goto error;
    for (size_t i = 0; i < sizeof(FAULTS) / sizeof(FAULTS[0]); i++) {
        PyObject *bit = PyLong_FromLong(FAULTS[i].bit);
        if (bit == NULL || PyDict_SetItemString(faults, FAULTS[i].name, bit) < 0) { Py_XDECREF(bit); goto error; }
        Py_DECREF(bit);
    }
    if (PyModule_AddObject(module, "FAULTS", faults) < 0) goto error;
    Py_INCREF(&TaskType);
    if (PyModule_AddObject(module, "TimerTask", (PyObject *)&TaskType) < 0) goto error;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(module, "TimerCore", (PyObject *)&CoreType) < 0) goto error;
    Py_INCREF(&OpLockType);
    if (PyModule_AddObject(module, "OpLock", (PyObject *)&OpLockType) < 0) goto error;
    Py_INCREF(&OperationType);
    if (PyModule_AddObject(module, "DelayedOperation", (PyObject *)&OperationType) < 0) goto error;
    Py_INCREF(&PurgatoryType);
    if (PyModule_AddObject(module, "PurgatoryCore", (PyObject *)&PurgatoryType) < 0) goto error;
    return module;
error:
    Py_DECREF(module);
    return NULL;
}
