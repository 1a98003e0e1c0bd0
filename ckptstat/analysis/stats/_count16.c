/* The count of 16-bit patterns that every F16 / BF16 statistic is read from (kernel16.py).

   add(bits, hist): adds to hist (a writable buffer of 65,536 native int64 counts) the count of each 2-byte
   pattern of bits (any buffer of an even number of bytes, at any alignment), each pattern read in the machine's
   byte order. The GIL is released while it counts.

   numpy's fastest route, np.add.at straight from the uint16 view, takes 1.2-2.2 ns a value; this loop takes
   ~0.4-0.5 (docs/performance.md, "Against reading the file"). It is optional: a build without a C compiler
   leaves it out, and kernel16.py counts with numpy, to the same counts. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Two tables of 32-bit counts, taken in turn: weights cluster near 0, so neighbouring values often share a
   pattern, and the second increment of one counter would wait for the first one's store. The tables are the
   thread's own, made once (512 KiB a thread that counts, kept until the process ends) and left zeroed by each
   call as it folds them into hist: a fresh pair per call cost a page fault per 4 KiB, more than the count of a
   1 MiB tensor. */
static _Thread_local uint32_t *tables;

static int count(const unsigned char *p, size_t n, int64_t *hist)
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
        if (failed)
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
