/* Planted faults, to prove the ASan fuzzing session catches what it is for.
 *
 * test_native_fuzz.py compiles a COPY of the native codec with `-include
 * plant.h`; no real build ever sees this file. It wraps the two CPython calls
 * through which the codec reads a buffer and returns bytes, so it does not
 * depend on how _native.c is written inside. OMNI_PLANT picks the fault:
 *
 *   oob      a buffer holding "OOB!" is copied and read one byte past its end
 *            (a heap-buffer-overflow ASan must report);
 *   diverge  bytes the codec returns holding "DIV!" say "DIV?" instead (a
 *            wrong but well-formed result the differential check must catch).
 *
 * Neither magic string is in the seed corpus: the fuzzer has to find it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

static int plant_is(const char *mode) {
    const char *got = getenv("OMNI_PLANT");
    return got != NULL && strcmp(got, mode) == 0;
}

static char *plant_find(const char *data, Py_ssize_t len, const char *magic) {
    if (data == NULL || len < 4) return NULL;
    return memmem(data, (size_t)len, magic, 4);
}

static void plant_overflow(const char *data, Py_ssize_t len) {
    if (!plant_is("oob") || plant_find(data, len, "OOB!") == NULL) return;
    char *copy = malloc((size_t)len);
    if (copy == NULL) return;
    memcpy(copy, data, (size_t)len);
    volatile char past = copy[len]; /* the planted bug: one byte too far */
    (void)past;
    free(copy);
}

static PyObject *plant_bytes(const char *data, Py_ssize_t len) {
    plant_overflow(data, len);
    PyObject *out = PyBytes_FromStringAndSize(data, len);
    if (out != NULL && plant_is("diverge")) {
        char *at = plant_find(PyBytes_AS_STRING(out), len, "DIV!");
        if (at != NULL) at[3] = '?';
    }
    return out;
}

static int plant_get_buffer(PyObject *obj, Py_buffer *view, int flags) {
    int result = PyObject_GetBuffer(obj, view, flags);
    if (result == 0) plant_overflow(view->buf, view->len);
    return result;
}

#define PyBytes_FromStringAndSize plant_bytes
#define PyObject_GetBuffer plant_get_buffer
