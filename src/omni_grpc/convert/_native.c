/* Optional native fast path of the OmniMessage codec (see _native.py).
 *
 * This file knows nothing of the schema: _native.py builds the tables from
 * the same ObjectSpecs the Python codec uses and hands them to configure().
 * Two directions, each mirroring the Python fast path (_fastpath.py) exactly
 * and declining (returning None) the moment anything is unusual, so that the
 * caller falls back to the Python codec, which decides and explains:
 *
 *   encode(dict)  -> OmniMessage wire bytes | None   (orjson-parsed line)
 *   decode(bytes) -> orjson-ready dict | None         (wire bytes of a message)
 *
 * Buffers are per call (no static state is touched after configure(), so a
 * callback into Python or a thread switch cannot clobber one).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_STR = 1, K_INT, K_ENUM, K_NUMLABEL, K_STRLIST, K_NESTED, K_JSONTEXT, K_FIDELITY };

#define MAX_FIELDS 32
#define MAX_TABLES 64
#define MAX_ARMS 128
#define MAX_NESTING 8
#define MAX_BYTES (64 * 1024 * 1024)

typedef struct {
    PyObject *key;       /* JSON key (str) */
    int kind;
    uint32_t number;     /* field number (number arm for K_NUMLABEL) */
    uint32_t number2;    /* label arm (K_NUMLABEL), text field (K_FIDELITY) */
    int required, presence, nullable, sub, many;
    PyObject *to_number; /* K_ENUM: dict str -> int */
    PyObject *to_text;   /* K_ENUM: dict int -> str */
} Field;

typedef struct {
    PyObject *type_text; /* str or NULL */
    int nfields;
    Field fields[MAX_FIELDS];
} Table;

typedef struct {
    int table;
    PyObject *envelope; /* envelope type text */
} Arm;

static Table tables[MAX_TABLES];
static int ntables = -1;
static Arm arms[MAX_ARMS + 1];        /* by payload field number */
static PyObject *arm_by_type;         /* dict payload type -> arm number */
static PyObject *json_text_cb;        /* dict -> str | DECLINE */
static PyObject *text_fragment_cb;    /* str -> Fragment | DECLINE */
static PyObject *decline;             /* the DECLINE sentinel */
static uint32_t f_timestamp, f_origin, f_hint1, f_hint2, arm_session_meta;
static PyObject *s_empty, *s_timestamp, *s_type, *s_payload, *s_origin, *s_session_meta;

/* ---- a growable per-call buffer ---------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    int failed; /* 1: out of memory or over the limit */
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->failed) return -1;
    if (b->len + more <= b->cap) return 0;
    if (b->len + more > MAX_BYTES) { b->failed = 1; return -1; }
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (!data) { b->failed = 1; return -1; }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put_varint(Buf *b, uint64_t v) {
    if (buf_reserve(b, 10) < 0) return -1;
    while (v >= 0x80) { b->data[b->len++] = (char)((v & 0x7F) | 0x80); v >>= 7; }
    b->data[b->len++] = (char)v;
    return 0;
}

static int put_bytes(Buf *b, uint32_t number, const char *s, Py_ssize_t n) {
    if (put_varint(b, ((uint64_t)number << 3) | 2) < 0 || put_varint(b, (uint64_t)n) < 0) return -1;
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

static int put_int(Buf *b, uint32_t number, int64_t v) {
    if (put_varint(b, (uint64_t)number << 3) < 0) return -1;
    return put_varint(b, (uint64_t)v);
}

/* ---- JSON dict -> wire -------------------------------------------------- */

/* 1 written, 0 declined, -1 Python error. */
static int put_str(Buf *b, uint32_t number, PyObject *value) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(value, &n);
    if (!s) { PyErr_Clear(); return 0; } /* a lone surrogate: the Python codec explains */
    return put_bytes(b, number, s, n) < 0 ? 0 : 1;
}

static int int64_of(PyObject *value, int64_t *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    *out = (int64_t)v;
    return 1;
}

static int encode_object(int t, PyObject *obj, Buf *b, int *truthy, int depth);

static int encode_field(const Field *f, PyObject *value, Buf *b, int *truthy, int depth) {
    int64_t iv;
    switch (f->kind) {
    case K_ENUM: {
        if (!PyUnicode_CheckExact(value)) return 0;
        PyObject *num = PyDict_GetItemWithError(f->to_number, value);
        if (!num) return PyErr_Occurred() ? -1 : 0;
        if (!int64_of(num, &iv)) return 0;
        if (iv) { *truthy = 1; if (put_int(b, f->number, iv) < 0) return 0; }
        return 1;
    }
    case K_NUMLABEL:
        if (PyUnicode_CheckExact(value)) { *truthy |= PyUnicode_GET_LENGTH(value) > 0; return put_str(b, f->number2, value); }
        if (!PyLong_CheckExact(value) || !int64_of(value, &iv)) return 0;
        *truthy |= iv != 0;
        return put_int(b, f->number, iv) < 0 ? 0 : 1;
    case K_INT:
        if (!PyLong_CheckExact(value) || !int64_of(value, &iv)) return 0;
        *truthy |= iv != 0;
        if (iv || f->presence) return put_int(b, f->number, iv) < 0 ? 0 : 1;
        return 1;
    case K_STR:
        if (value == Py_None && f->nullable) return f->required ? 1 : 0;
        if (!PyUnicode_CheckExact(value)) return 0;
        *truthy |= PyUnicode_GET_LENGTH(value) > 0;
        if (PyUnicode_GET_LENGTH(value) || f->presence) return put_str(b, f->number, value);
        return 1;
    case K_STRLIST: {
        if (!PyList_CheckExact(value)) return 0;
        Py_ssize_t n = PyList_GET_SIZE(value);
        if (!n && !f->required) return 0;
        *truthy |= n > 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(value, i);
            if (!PyUnicode_CheckExact(item)) return 0;
            int r = put_str(b, f->number, item);
            if (r <= 0) return r;
        }
        return 1;
    }
    case K_JSONTEXT: {
        if (!PyDict_CheckExact(value)) return 0;
        PyObject *text = PyObject_CallOneArg(json_text_cb, value);
        if (!text) return -1;
        int r = 0;
        if (text != decline && PyUnicode_CheckExact(text)) {
            *truthy |= PyUnicode_GET_LENGTH(text) > 0;
            r = put_str(b, f->number, text);
        }
        Py_DECREF(text);
        return r;
    }
    case K_NESTED: {
        if (depth >= MAX_NESTING) return 0;
        if (f->many) {
            if (!PyList_CheckExact(value)) return 0;
            Py_ssize_t n = PyList_GET_SIZE(value);
            if (!n && !f->required) return 0;
            *truthy |= n > 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *item = PyList_GET_ITEM(value, i);
                if (!PyDict_CheckExact(item)) return 0;
                Buf sub = {0};
                int any = 0;
                int r = encode_object(f->sub, item, &sub, &any, depth + 1);
                if (r == 1 && put_bytes(b, f->number, sub.data ? sub.data : "", sub.len) < 0) r = 0;
                PyMem_Free(sub.data);
                if (r <= 0) return r;
            }
            return 1;
        }
        if (!PyDict_CheckExact(value)) return 0;
        Buf sub = {0};
        int any = 0;
        int r = encode_object(f->sub, value, &sub, &any, depth + 1);
        /* all zeros stays unset, as the Python codec leaves it */
        if (r == 1 && any) {
            *truthy = 1;
            if (put_bytes(b, f->number, sub.data ? sub.data : "", sub.len) < 0) r = 0;
        }
        PyMem_Free(sub.data);
        return r;
    }
    default: /* K_FIDELITY and anything new: the Python codec decides */
        return 0;
    }
}

static int encode_object(int t, PyObject *obj, Buf *b, int *truthy, int depth) {
    const Table *tab = &tables[t];
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    int last = -1, required = 0, need = 0;
    for (int i = 0; i < tab->nfields; i++) need += tab->fields[i].required;
    while (PyDict_Next(obj, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return 0;
        if (tab->type_text && PyUnicode_Compare(key, s_type) == 0) {
            if (last >= 0) return 0;
            last = 0;
            continue;
        }
        int found = -1;
        for (int i = 0; i < tab->nfields; i++) {
            if (PyUnicode_Compare(key, tab->fields[i].key) == 0) { found = i; break; }
        }
        if (found < 0) { if (PyErr_Occurred()) return -1; return 0; }
        if (last >= found + 1) return 0; /* keys out of reference order */
        last = found + 1;
        required += tab->fields[found].required;
        int r = encode_field(&tab->fields[found], value, b, truthy, depth);
        if (r <= 0) return r;
    }
    if (required != need || b->failed) return 0;
    return 1;
}

static PyObject *py_encode(PyObject *self, PyObject *obj) {
    if (ntables < 0) Py_RETURN_NONE;
    if (!PyDict_CheckExact(obj) || PyDict_GET_SIZE(obj) < 3 || PyDict_GET_SIZE(obj) > 4) Py_RETURN_NONE;
    PyObject *key, *value, *vals[4] = {0};
    PyObject *names[4] = {s_timestamp, s_type, s_payload, s_origin};
    Py_ssize_t pos = 0;
    int i = 0;
    while (PyDict_Next(obj, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || PyUnicode_Compare(key, names[i]) != 0) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        vals[i++] = value;
    }
    PyObject *ts = vals[0], *kind = vals[1], *payload = vals[2], *origin = vals[3];
    if (!PyUnicode_CheckExact(ts) || !PyUnicode_CheckExact(kind) || !PyDict_CheckExact(payload)) Py_RETURN_NONE;
    uint32_t arm;
    if (PyUnicode_Compare(kind, s_session_meta) == 0) {
        arm = arm_session_meta;
    } else {
        PyObject *ptype = PyDict_GetItemWithError(payload, s_type);
        if (!ptype) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
        if (!PyUnicode_CheckExact(ptype)) Py_RETURN_NONE;
        PyObject *num = PyDict_GetItemWithError(arm_by_type, ptype);
        if (!num) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
        arm = (uint32_t)PyLong_AsUnsignedLong(num);
    }
    if (arm > MAX_ARMS || arms[arm].envelope == NULL) Py_RETURN_NONE;
    int cmp = PyUnicode_Compare(kind, arms[arm].envelope);
    if (cmp != 0) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
    if (origin) {
        if (!PyList_CheckExact(origin) || PyList_GET_SIZE(origin) == 0) Py_RETURN_NONE;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(origin); j++)
            if (!PyUnicode_CheckExact(PyList_GET_ITEM(origin, j))) Py_RETURN_NONE;
    }
    Buf out = {0}, sub = {0};
    int any = 0, r = 1;
    if (PyUnicode_GET_LENGTH(ts)) r = put_str(&out, f_timestamp, ts);
    if (r == 1 && origin)
        for (Py_ssize_t j = 0; r == 1 && j < PyList_GET_SIZE(origin); j++)
            r = put_str(&out, f_origin, PyList_GET_ITEM(origin, j));
    if (r == 1) r = encode_object(arms[arm].table, payload, &sub, &any, 0);
    if (r == 1 && put_bytes(&out, arm, sub.data ? sub.data : "", sub.len) < 0) r = 0;
    PyObject *result = NULL;
    if (r == 1 && !out.failed) result = PyBytes_FromStringAndSize(out.data, out.len);
    else if (r == 0) result = Py_NewRef(Py_None);
    PyMem_Free(out.data);
    PyMem_Free(sub.data);
    return result;
}

/* ---- wire -> JSON dict -------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
} Reader;

static int get_varint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return 0;
        unsigned char byte = *r->p++;
        if (shift == 63 && byte > 1) return 0;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) { *out = v; return 1; }
    }
    return 0;
}

/* One field's tag and, for wire type 2, its bytes; 0 on malformed input. */
static int get_field(Reader *r, uint32_t *number, int *wire, uint64_t *v, const unsigned char **s) {
    uint64_t tag;
    if (!get_varint(r, &tag) || (tag >> 3) == 0 || (tag >> 3) > 536870911) return 0;
    *number = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    if (*wire == 0) return get_varint(r, v);
    if (*wire != 2) return 0; /* nothing in the tables uses other wire types */
    if (!get_varint(r, v) || *v > (uint64_t)(r->end - r->p)) return 0;
    *s = r->p;
    r->p += *v;
    return 1;
}

/* Each field's value as read: a str, an int, or a list for repeated fields. */
static PyObject *decode_object(int t, const unsigned char *p, Py_ssize_t n, int depth);

static PyObject *text_of(const unsigned char *s, uint64_t n) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "strict");
    if (!text && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return text; /* NULL without an error set: decline */
}

#define DECLINED(obj) ((obj) == NULL && !PyErr_Occurred())

static PyObject *decode_object(int t, const unsigned char *p, Py_ssize_t n, int depth) {
    const Table *tab = &tables[t];
    PyObject *vals[MAX_FIELDS] = {0};
    PyObject *out = NULL;
    Reader r = {p, p + n};
    int ok = 1;
    if (depth > MAX_NESTING) return NULL;
    while (ok && r.p < r.end) {
        uint32_t number;
        int wire;
        uint64_t v = 0;
        const unsigned char *s = NULL;
        if (!get_field(&r, &number, &wire, &v, &s)) { ok = 0; break; }
        int found = -1, second = 0;
        for (int i = 0; i < tab->nfields; i++) {
            const Field *f = &tab->fields[i];
            if (f->number == number) { found = i; break; }
            if ((f->kind == K_NUMLABEL || f->kind == K_FIDELITY) && f->number2 == number) { found = i; second = 1; break; }
        }
        if (found < 0) { ok = 0; break; } /* unknown field: the Python codec decides */
        const Field *f = &tab->fields[found];
        int want = (f->kind == K_INT || f->kind == K_ENUM || (f->kind == K_NUMLABEL && !second)) ? 0 : 2;
        if (wire != want || f->kind == K_FIDELITY) { ok = 0; break; }
        PyObject *item = NULL;
        if (f->kind == K_INT || (f->kind == K_NUMLABEL && !second)) item = PyLong_FromLongLong((long long)(int64_t)v);
        else if (f->kind == K_ENUM) item = PyLong_FromLong((long)(int32_t)(uint32_t)v);
        else if (f->kind == K_NESTED) item = decode_object(f->sub, s, (Py_ssize_t)v, depth + 1);
        else item = text_of(s, v);
        if (!item) { ok = 0; break; }
        if (f->kind == K_STRLIST || (f->kind == K_NESTED && f->many)) {
            if (!vals[found] && !(vals[found] = PyList_New(0))) { Py_DECREF(item); ok = 0; break; }
            int e = PyList_Append(vals[found], item);
            Py_DECREF(item);
            if (e < 0) { ok = 0; break; }
        } else {
            if (vals[found]) { Py_DECREF(item); ok = 0; break; } /* repeated singular field */
            vals[found] = item;
        }
    }
    if (!ok || PyErr_Occurred()) goto done;
    out = PyDict_New();
    if (!out) goto done;
    if (tab->type_text && PyDict_SetItem(out, s_type, tab->type_text) < 0) goto fail;
    for (int i = 0; i < tab->nfields; i++) {
        const Field *f = &tab->fields[i];
        PyObject *v = vals[i], *put = NULL;
        switch (f->kind) {
        case K_ENUM:
            if (v && PyLong_AsLong(v) != 0) {
                put = PyDict_GetItemWithError(f->to_text, v);
                if (!put && PyErr_Occurred()) goto fail;
                put = Py_NewRef(put ? put : v); /* a number from a newer schema stays a number */
            }
            break;
        case K_NUMLABEL:
            if (v) put = Py_NewRef(v);
            break;
        case K_INT:
            if (f->presence) { if (v) put = Py_NewRef(v); }
            else if (f->required || (v && PyLong_AsLong(v) != 0)) put = v ? Py_NewRef(v) : PyLong_FromLong(0);
            break;
        case K_STR:
            if (f->presence) {
                if (v) put = Py_NewRef(v);
                else if (f->nullable && f->required) put = Py_NewRef(Py_None);
            } else if (f->required || (v && PyUnicode_GET_LENGTH(v))) {
                put = v ? Py_NewRef(v) : PyUnicode_New(0, 0);
            }
            break;
        case K_STRLIST:
            if (v || f->required) put = v ? Py_NewRef(v) : PyList_New(0);
            break;
        case K_JSONTEXT:
            if (v && PyUnicode_GET_LENGTH(v)) {
                put = PyObject_CallOneArg(text_fragment_cb, v);
                if (!put) goto fail;
                if (put == decline) { Py_DECREF(put); goto decline_out; }
            }
            break;
        case K_NESTED:
            if (f->many) { if (v || f->required) put = v ? Py_NewRef(v) : PyList_New(0); }
            else {
                put = v ? Py_NewRef(v) : decode_object(f->sub, (const unsigned char *)"", 0, depth + 1);
                if (!put) { if (PyErr_Occurred()) goto fail; goto decline_out; }
            }
            break;
        default:
            break; /* K_FIDELITY never gets here (declined while reading) */
        }
        if (PyErr_Occurred()) { Py_XDECREF(put); goto fail; }
        if (put) {
            int e = PyDict_SetItem(out, f->key, put);
            Py_DECREF(put);
            if (e < 0) goto fail;
        }
    }
    goto done;
decline_out:
fail:
    Py_CLEAR(out);
done:
    for (int i = 0; i < tab->nfields; i++) Py_XDECREF(vals[i]);
    return out;
}

static PyObject *py_decode(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (ntables < 0) Py_RETURN_NONE;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *ts = NULL, *origin = NULL, *payload = NULL, *out = NULL;
    uint32_t arm = 0;
    Reader r = {view.buf, (const unsigned char *)view.buf + view.len};
    int ok = view.len <= MAX_BYTES;
    while (ok && r.p < r.end) {
        uint32_t number;
        int wire;
        uint64_t v = 0;
        const unsigned char *s = NULL;
        if (!get_field(&r, &number, &wire, &v, &s) || wire != 2) { ok = 0; break; }
        if (number == f_timestamp) {
            if (ts || !(ts = text_of(s, v))) { ok = 0; break; }
        } else if (number == f_origin) {
            PyObject *hop = text_of(s, v);
            if (!hop) { ok = 0; break; }
            if (!origin && !(origin = PyList_New(0))) { Py_DECREF(hop); ok = 0; break; }
            int e = PyList_Append(origin, hop);
            Py_DECREF(hop);
            if (e < 0) { ok = 0; break; }
        } else if (number <= MAX_ARMS && arms[number].envelope && !payload) {
            arm = number;
            if (!(payload = decode_object(arms[number].table, s, (Py_ssize_t)v, 0))) { ok = 0; break; }
        } else {
            ok = 0; /* hints, unknown payloads, unknown fields, a second arm */
        }
    }
    if (ok && payload && !PyErr_Occurred()) {
        out = PyDict_New();
        if (out && (PyDict_SetItem(out, s_timestamp, ts ? ts : s_empty) < 0
                    || PyDict_SetItem(out, s_type, arms[arm].envelope) < 0
                    || PyDict_SetItem(out, s_payload, payload) < 0
                    || (origin && PyDict_SetItem(out, s_origin, origin) < 0)))
            Py_CLEAR(out);
    }
    Py_XDECREF(ts);
    Py_XDECREF(origin);
    Py_XDECREF(payload);
    PyBuffer_Release(&view);
    if (!out && !PyErr_Occurred()) Py_RETURN_NONE;
    return out;
}

/* ---- configuration ------------------------------------------------------ */

static PyObject *py_configure(PyObject *self, PyObject *args) {
    PyObject *table_specs, *arm_specs, *envelope;
    if (ntables >= 0) { PyErr_SetString(PyExc_RuntimeError, "already configured"); return NULL; }
    if (!PyArg_ParseTuple(args, "O!O!O!OOO", &PyList_Type, &table_specs, &PyList_Type, &arm_specs,
                          &PyTuple_Type, &envelope, &json_text_cb, &text_fragment_cb, &decline))
        return NULL;
    Py_ssize_t nt = PyList_GET_SIZE(table_specs);
    if (nt > MAX_TABLES) { PyErr_SetString(PyExc_ValueError, "too many tables"); return NULL; }
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *type_text, *fields;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(table_specs, t), "OO!", &type_text, &PyList_Type, &fields)) return NULL;
        Table *tab = &tables[t];
        tab->type_text = type_text == Py_None ? NULL : Py_NewRef(type_text);
        tab->nfields = (int)PyList_GET_SIZE(fields);
        if (tab->nfields > MAX_FIELDS) { PyErr_SetString(PyExc_ValueError, "too many fields"); return NULL; }
        for (int i = 0; i < tab->nfields; i++) {
            Field *f = &tab->fields[i];
            PyObject *key, *to_number, *to_text;
            unsigned int number, number2;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(fields, i), "UiIIpppiiOO", &key, &f->kind, &number,
                                  &number2, &f->required, &f->presence, &f->nullable, &f->sub,
                                  &f->many, &to_number, &to_text))
                return NULL;
            if (f->kind == K_NESTED && (f->sub < 0 || f->sub >= nt)) {
                PyErr_SetString(PyExc_ValueError, "bad nested table");
                return NULL;
            }
            f->key = Py_NewRef(key);
            f->number = number;
            f->number2 = number2;
            f->to_number = Py_NewRef(to_number);
            f->to_text = Py_NewRef(to_text);
        }
    }
    for (Py_ssize_t a = 0; a < PyList_GET_SIZE(arm_specs); a++) {
        unsigned int number;
        int table;
        PyObject *env;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(arm_specs, a), "IiU", &number, &table, &env)) return NULL;
        if (number > MAX_ARMS || table < 0 || table >= nt) { PyErr_SetString(PyExc_ValueError, "bad arm"); return NULL; }
        arms[number].table = table;
        arms[number].envelope = Py_NewRef(env);
    }
    PyObject *by_type;
    if (!PyArg_ParseTuple(envelope, "IIIIIO!", &f_timestamp, &f_origin, &f_hint1, &f_hint2,
                          &arm_session_meta, &PyDict_Type, &by_type))
        return NULL;
    arm_by_type = Py_NewRef(by_type);
    Py_INCREF(json_text_cb);
    Py_INCREF(text_fragment_cb);
    Py_INCREF(decline);
    ntables = (int)nt;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS, "Installs the tables built by _native.py (once)."},
    {"encode", py_encode, METH_O, "An orjson-parsed message as OmniMessage wire bytes, or None."},
    {"decode", py_decode, METH_O, "OmniMessage wire bytes as an orjson-ready dict, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_codec", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__codec(void) {
    s_empty = PyUnicode_New(0, 0);
    s_timestamp = PyUnicode_InternFromString("timestamp");
    s_type = PyUnicode_InternFromString("type");
    s_payload = PyUnicode_InternFromString("payload");
    s_origin = PyUnicode_InternFromString("origin");
    s_session_meta = PyUnicode_InternFromString("session_meta");
    if (!s_empty || !s_timestamp || !s_type || !s_payload || !s_origin || !s_session_meta) return NULL;
    return PyModule_Create(&module);
}
