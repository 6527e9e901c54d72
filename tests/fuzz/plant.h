/* Planted faults, to prove the ASan fuzzing session catches what it is for.
 *
 * test_native_fuzz.py compiles a COPY of the native codec with `-include
 * plant.h`; no real build ever sees this file. It wraps the CPython calls
 * through which the codec reads a buffer and makes bytes or text from one,
 * so it does not depend on how _native.c is written inside. OMNI_PLANT picks
 * the fault:
 *
 *   oob      a buffer holding "OOB!" is copied and read one byte past its end
 *            (a heap-buffer-overflow ASan must report);
 *   diverge  bytes or text the codec makes from a buffer holding "DIV!" say
 *            "DIV?" instead (a wrong but well-formed result the differential
 *            check must catch).
 *
 * Neither magic string is in the seed corpus: the fuzzer has to find it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

static inline int plant_is(const char *mode) {
    const char *got = getenv("OMNI_PLANT");
    return got != NULL && strcmp(got, mode) == 0;
}

static inline char *plant_find(const char *data, Py_ssize_t len, const char *magic) {
    if (data == NULL || len < 4) return NULL;
    return memmem(data, (size_t)len, magic, 4);
}

static inline void plant_overflow(const char *data, Py_ssize_t len) {
    if (!plant_is("oob") || plant_find(data, len, "OOB!") == NULL) return;
    char *copy = malloc((size_t)len);
    if (copy == NULL) return;
    memcpy(copy, data, (size_t)len);
    volatile char past = copy[len]; /* the planted bug: one byte too far */
    (void)past;
    free(copy);
}

/* The buffer to make a result from: `data` itself, or a changed copy to free. */
static inline const char *plant_source(const char *data, Py_ssize_t len, char **copy) {
    *copy = NULL;
    plant_overflow(data, len);
    char *at = plant_is("diverge") ? plant_find(data, len, "DIV!") : NULL;
    if (at == NULL || (*copy = malloc((size_t)len)) == NULL) return data;
    memcpy(*copy, data, (size_t)len);
    (*copy)[at - data + 3] = '?';
    return *copy;
}

static inline PyObject *plant_bytes(const char *data, Py_ssize_t len) {
    char *copy;
    PyObject *out = PyBytes_FromStringAndSize(plant_source(data, len, &copy), len);
    free(copy);
    return out;
}

static inline PyObject *plant_text(const char *data, Py_ssize_t len) {
    char *copy;
    PyObject *out = PyUnicode_FromStringAndSize(plant_source(data, len, &copy), len);
    free(copy);
    return out;
}

static inline PyObject *plant_decode(const char *data, Py_ssize_t len, const char *errors) {
    char *copy;
    PyObject *out = PyUnicode_DecodeUTF8(plant_source(data, len, &copy), len, errors);
    free(copy);
    return out;
}

static inline int plant_as_string(PyObject *obj, char **data, Py_ssize_t *len) {
    int result = PyBytes_AsStringAndSize(obj, data, len);
    if (result == 0 && len != NULL) plant_overflow(*data, *len);
    return result;
}

static inline int plant_get_buffer(PyObject *obj, Py_buffer *view, int flags) {
    int result = PyObject_GetBuffer(obj, view, flags);
    if (result == 0) plant_overflow(view->buf, view->len);
    return result;
}

#define PyBytes_FromStringAndSize plant_bytes
#define PyUnicode_FromStringAndSize plant_text
#define PyUnicode_DecodeUTF8 plant_decode
#define PyObject_GetBuffer plant_get_buffer
#define PyBytes_AsStringAndSize plant_as_string
