/* The count of 16-bit patterns that every F16 / BF16 statistic is read from (kernel16.py).

   add(bits, hist): adds to hist (a writable buffer of 65,536 native int64 counts) the count of each 2-byte
   pattern of bits (any buffer of an even number of bytes, at any alignment), each pattern read in the machine's
   byte order. The GIL is released while it counts.

   numpy's fastest route, np.add.at straight from the uint16 view, takes 1.2-2.2 ns a value; this loop takes
   ~0.4-0.5 (docs/performance.md, "Against reading the file"). It is optional: a build without a C compiler
   leaves it out, and kernel16.py counts with numpy, to the same counts. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#define GUARDED 1
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#endif

#define NBINS 65536
/* Under this many values the counts go straight into hist: zeroing the two tables below would cost more. */
#define SMALL 65536
/* At most this many values into 32-bit counts before they are folded into hist. */
#define BLOCK ((size_t)1 << 31)

static inline uint16_t pattern(const unsigned char *p, size_t i)
{
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);   /* one load; any alignment */
    return v;
}

#ifdef GUARDED
/* kernel16.py counts a local file's bytes through a memory map: if the file shrinks meanwhile (another process
   truncates it), reading a page past its new end raises SIGBUS, which would end the process. While a thread counts,
   `escape` says where to jump back to: the count then fails with an error naming the file (kernel16.hist16), never
   a crash. A SIGBUS of any other thread or code goes to the handler that was there before (Python's faulthandler,
   or the default: the process ends). The handler is (re)installed before each count if something replaced it. */
static _Thread_local sigjmp_buf *escape;
static struct sigaction previous;
static pthread_mutex_t installing = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    if (escape != NULL)
        siglongjmp(*escape, 1);
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    } else {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

static int guard(void)
{
    struct sigaction now, ours;
    int failed = 0;
    pthread_mutex_lock(&installing);
    if (sigaction(SIGBUS, NULL, &now) == 0 && !((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus)) {
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&ours.sa_mask);
        failed = sigaction(SIGBUS, &ours, &previous);
    }
    pthread_mutex_unlock(&installing);
    return failed;
}
#endif

/* Two tables of 32-bit counts, taken in turn: weights cluster near 0, so neighbouring values often share a
   pattern, and the second increment of one counter would wait for the first one's store. The tables are the
   thread's own, made once (512 KiB a thread that counts, kept until the process ends) and left zeroed by each
   call as it folds them into hist: a fresh pair per call cost a page fault per 4 KiB, more than the count of a
   1 MiB tensor. */
static _Thread_local uint32_t *tables;

static int count_all(const unsigned char *p, size_t n, int64_t *hist)
{
    if (n < SMALL) {
        for (size_t i = 0; i < n; i++)
            hist[pattern(p, i)]++;
        return 0;
    }
    if (tables == NULL && (tables = calloc(2 * NBINS, sizeof(uint32_t))) == NULL)
        return -1;
    uint32_t *t0 = tables, *t1 = tables + NBINS;
    for (size_t done = 0; done < n; done += BLOCK) {
        size_t m = n - done < BLOCK ? n - done : BLOCK;
        const unsigned char *q = p + 2 * done;
        size_t i = 0;
        for (; i + 2 <= m; i += 2) {
            t0[pattern(q, i)]++;
            t1[pattern(q, i + 1)]++;
        }
        if (i < m)
            t0[pattern(q, i)]++;
        for (size_t j = 0; j < NBINS; j++) {
            hist[j] += (int64_t)t0[j] + (int64_t)t1[j];
            t0[j] = t1[j] = 0;
        }
    }
    return 0;
}

/* count_all, or -2 when the bytes could not be read (SIGBUS: a mapped file shrank), the counts then partial. */
static int count(const unsigned char *p, size_t n, int64_t *hist)
{
#ifdef GUARDED
    sigjmp_buf here;
    if (guard() != 0)
        return count_all(p, n, hist);
    if (sigsetjmp(here, 1)) {
        escape = NULL;
        if (tables != NULL)   /* left mid-count: zeroed for the thread's next call */
            memset(tables, 0, 2 * NBINS * sizeof(uint32_t));
        return -2;
    }
    escape = &here;
    int done = count_all(p, n, hist);
    escape = NULL;
    return done;
#else
    return count_all(p, n, hist);
#endif
}

static PyObject *add(PyObject *self, PyObject *args)
{
    PyObject *bits_obj, *hist_obj;
    if (!PyArg_ParseTuple(args, "OO:add", &bits_obj, &hist_obj))
        return NULL;
    Py_buffer bits, hist;
    if (PyObject_GetBuffer(bits_obj, &bits, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(hist_obj, &hist, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bits);
        return NULL;
    }
    int failed = 0;
    if (bits.len % 2 != 0) {
        PyErr_SetString(PyExc_ValueError, "bits: an odd number of bytes");
        failed = 1;
    } else if (hist.len != NBINS * (Py_ssize_t)sizeof(int64_t) || ((uintptr_t)hist.buf % sizeof(int64_t)) != 0) {
        PyErr_SetString(PyExc_ValueError, "hist: not 65,536 aligned int64 counts");
        failed = 1;
    } else {
        Py_BEGIN_ALLOW_THREADS
        failed = count((const unsigned char *)bits.buf, (size_t)bits.len / 2, (int64_t *)hist.buf);
        Py_END_ALLOW_THREADS
        if (failed == -2) {   /* EIO: an OS error with its reason (errors.as_checkpoint_error: one line) */
            PyObject *why = Py_BuildValue("(is)", EIO, "its bytes are gone (the file shrank while it was read)");
            if (why != NULL) {
                PyErr_SetObject(PyExc_OSError, why);
                Py_DECREF(why);
            }
        }
        else if (failed)
            PyErr_NoMemory();
    }
    PyBuffer_Release(&hist);
    PyBuffer_Release(&bits);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS,
     "add(bits, hist): add to hist (65,536 native int64) the count of each 2-byte pattern of bits, native order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_count16", "The 16-bit pattern count of ckptstat stats (kernel16.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__count16(void)
{
    return PyModule_Create(&module);
}
