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
    int nrequired;       /* fields an object must have */
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

/* Writes v as a varint at out (room for 10 bytes); returns its length. */
static int varint_at(char *out, uint64_t v) {
    int n = 0;
    while (v >= 0x80) { out[n++] = (char)((v & 0x7F) | 0x80); v >>= 7; }
    out[n++] = (char)v;
    return n;
}

static int put_varint(Buf *b, uint64_t v) {
    if (buf_reserve(b, 10) < 0) return -1;
    b->len += varint_at(b->data + b->len, v);
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
    int last = -1, required = 0;
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
    if (required != tab->nrequired || b->failed) return 0;
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

/* ---- C views of the tables, for the text paths -------------------------- */

/* Filled by configure() from the Python objects above; the strings they
 * point into belong to objects the tables hold, so they live as long. */
typedef struct {
    const char *label;   /* UTF-8 enum label */
    Py_ssize_t len;
    int64_t value;
} Label;

typedef struct {
    const char *key;     /* UTF-8 JSON key */
    Py_ssize_t key_len;
    char *json_key;      /* '"key":' as written */
    Py_ssize_t json_key_len;
    Label *labels;       /* K_ENUM */
    int nlabels;
} FieldText;

typedef struct {
    const char *type_text; /* UTF-8 payload type, or NULL */
    Py_ssize_t type_len;
    char *json_type;       /* '"type":"<type_text>"' */
    Py_ssize_t json_type_len;
    FieldText fields[MAX_FIELDS];
} TableText;

typedef struct {
    const char *envelope;  /* UTF-8 envelope type */
    Py_ssize_t envelope_len;
    char *json_envelope;   /* '"type":"<envelope>"' */
    Py_ssize_t json_envelope_len;
} ArmText;

typedef struct {
    const char *type_text;
    Py_ssize_t len;
    uint32_t arm;
} ArmByType;

static TableText table_text[MAX_TABLES];
static ArmText arm_text[MAX_ARMS + 1];
static ArmByType *arm_types;
static int narm_types;

/* ---- UTF-8 and JSON strings -------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (no surrogates, no overlongs,
 * nothing past U+10FFFF), or 0. */
static int utf8_seq(const unsigned char *s, const unsigned char *end) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (end - s >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (end - s < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* a surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (end - s < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;
        if (c == 0xF4 && s[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    const unsigned char *end = s + n;
    while (s < end) {
        if (*s < 0x80) { s++; continue; }
        int k = utf8_seq(s, end);
        if (!k) return 0;
        s += k;
    }
    return 1;
}

static const char hexdigits[] = "0123456789abcdef";

/* A string as orjson (and so the Python codec) writes it; 0 for invalid UTF-8. */
static int put_json_string(Buf *b, const unsigned char *s, Py_ssize_t n) {
    if (buf_reserve(b, n + 2) < 0) return 0;
    b->data[b->len++] = '"';
    const unsigned char *end = s + n;
    while (s < end) {
        const unsigned char *run = s;
        while (s < end && *s >= 0x20 && *s != '"' && *s != '\\' && *s < 0x80) s++;
        if (s > run) {
            if (buf_reserve(b, (s - run) + 1) < 0) return 0;
            memcpy(b->data + b->len, run, (size_t)(s - run));
            b->len += s - run;
        }
        if (s == end) break;
        unsigned char c = *s;
        if (c >= 0x80) {
            int k = utf8_seq(s, end);
            if (!k || buf_reserve(b, k) < 0) return 0;
            memcpy(b->data + b->len, s, (size_t)k);
            b->len += k;
            s += k;
            continue;
        }
        if (buf_reserve(b, 6) < 0) return 0;
        char *o = b->data + b->len;
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        }
        if (esc) { o[0] = esc[0]; o[1] = esc[1]; b->len += 2; }
        else {
            o[0] = '\\'; o[1] = 'u'; o[2] = '0'; o[3] = '0';
            o[4] = hexdigits[c >> 4]; o[5] = hexdigits[c & 15];
            b->len += 6;
        }
        s++;
    }
    if (buf_reserve(b, 1) < 0) return 0;
    b->data[b->len++] = '"';
    return 1;
}

static int put_raw(Buf *b, const char *s, Py_ssize_t n) {
    if (n <= 0) return !b->failed; /* memcpy's pointers must be valid even for 0 bytes */
    if (buf_reserve(b, n) < 0) return 0;
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 1;
}

static int put_char(Buf *b, char c) {
    if (buf_reserve(b, 1) < 0) return 0;
    b->data[b->len++] = c;
    return 1;
}

static int put_decimal(Buf *b, int64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    return put_raw(b, tmp, n);
}

/* ---- JSON text -> wire -------------------------------------------------- */

/* Reads a JSON text in one pass and writes the wire bytes the Python codec's
 * message would serialize to (deterministically), for the same common case
 * the dict path handles. Whitespace and escapes are read as any JSON parser
 * reads them; anything else unusual declines (0), and the Python codec then
 * parses the text and decides. Keys must come in reference order, so a
 * duplicate key also declines. */
typedef struct {
    const unsigned char *p, *end;
    Buf scratch; /* an escaped string's decoded bytes, per call */
    Py_ssize_t fidelity_long; /* > 0: a fidelity string of this many bytes declines */
    Buf hint;   /* the KeyOrder body of a payload fidelity's key order, when it needs one */
    int hinted;
} Text;

static inline void skip_ws(Text *x) {
    while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r')) x->p++;
}

static inline int eat(Text *x, char c) {
    skip_ws(x);
    if (x->p < x->end && *x->p == (unsigned char)c) { x->p++; return 1; }
    return 0;
}

static inline int peek(Text *x) {
    skip_ws(x);
    return x->p < x->end ? *x->p : -1;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* The string at x->p as UTF-8 bytes (pointing into the text, or into the
 * scratch buffer when it holds escapes: valid until the next call). */
static int scan_string(Text *x, const char **s, Py_ssize_t *n) {
    skip_ws(x);
    if (x->p >= x->end || *x->p != '"') return 0;
    const unsigned char *start = ++x->p, *p = start, *end = x->end;
    int wide = 0;
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20) { wide |= *p >= 0x80; p++; }
    if (p >= end || *p < 0x20) return 0;
    if (*p == '"') {
        if (wide && !utf8_valid(start, p - start)) return 0;
        *s = (const char *)start;
        *n = p - start;
        x->p = p + 1;
        return 1;
    }
    if (wide && !utf8_valid(start, p - start)) return 0; /* the part before the escape */
    Buf *b = &x->scratch;
    b->len = 0;
    b->failed = 0;
    if (!put_raw(b, (const char *)start, p - start)) return 0;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c != '\\') {
            if (c < 0x80) { /* a run of plain ASCII, copied at once (tool arguments are mostly that) */
                const unsigned char *run = p;
                while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
                if (!put_raw(b, (const char *)run, p - run)) return 0;
                continue;
            }
            int k = utf8_seq(p, end);
            if (!k || !put_raw(b, (const char *)p, k)) return 0;
            p += k;
            continue;
        }
        if (end - p < 2) return 0;
        char out = 0;
        switch (p[1]) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': break;
        default: return 0;
        }
        if (p[1] != 'u') { if (!put_char(b, out)) return 0; p += 2; continue; }
        unsigned cp, lo;
        if (end - p < 6 || !hex4(p + 2, &cp)) return 0;
        p += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return 0; /* a lone low surrogate */
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return 0; /* a lone high surrogate: the Python codec explains */
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
        }
        char u[4];
        int k;
        if (cp < 0x80) { u[0] = (char)cp; k = 1; }
        else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
        else if (cp < 0x10000) {
            u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (char)(0x80 | (cp & 0x3F)); k = 3;
        } else {
            u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); k = 4;
        }
        if (!put_raw(b, u, k)) return 0;
    }
    if (p >= end) return 0;
    x->p = p + 1;
    *s = b->data ? b->data : "";
    *n = b->len;
    return 1;
}

/* An integer as orjson reads it into a 64-bit int; fractions, exponents,
 * "-0" and 19 digits or more decline (the Python codec's screening sends
 * those down its slow path). */
static int scan_int(Text *x, int64_t *out) {
    skip_ws(x);
    const unsigned char *p = x->p, *end = x->end;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    const unsigned char *digits = p;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (p - digits == 18) return 0; /* checked first: a 19th digit could overflow v */
        v = v * 10 + (*p - '0');
        p++;
    }
    Py_ssize_t nd = p - digits;
    if (nd == 0 || (digits[0] == '0' && nd > 1)) return 0;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
    if (neg && v == 0) return 0;
    *out = neg ? -v : v;
    x->p = p;
    return 1;
}

static int scan_literal(Text *x, const char *word, Py_ssize_t n) {
    skip_ws(x);
    if (x->end - x->p < n || memcmp(x->p, word, (size_t)n) != 0) return 0;
    x->p += n;
    return 1;
}

/* A value already in the exact text both codecs write (orjson's spelling,
 * which is JavaScript's for what is accepted here): no whitespace, only the
 * escapes they write, integers of at most 15 digits, no duplicate keys, no
 * keys JavaScript would reorder. Consumes it and returns 1, else 0. Used for
 * JSON Schema texts, which are copied as they are. */
static int canonical_value(Text *x, int depth);

static int canonical_string(Text *x, const unsigned char **ks, Py_ssize_t *kn) {
    const unsigned char *p = x->p, *end = x->end;
    if (p >= end || *p != '"') return 0;
    const unsigned char *start = ++p;
    while (p < end && *p != '"') {
        unsigned char c = *p;
        if (c < 0x20) return 0;
        if (c >= 0x80) { int k = utf8_seq(p, end); if (!k) return 0; p += k; continue; }
        if (c != '\\') { p++; continue; }
        if (end - p < 2) return 0;
        unsigned char e = p[1];
        if (e == '"' || e == '\\' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') { p += 2; continue; }
        unsigned cp;
        if (e != 'u' || end - p < 6 || p[2] != '0' || p[3] != '0' || !hex4(p + 2, &cp)) return 0;
        if (cp >= 0x20 || cp == '\b' || cp == '\f' || cp == '\n' || cp == '\r' || cp == '\t') return 0;
        if (p[4] > '1' || (p[5] >= 'A' && p[5] <= 'F')) return 0; /* lower-case hex only */
        p += 6;
    }
    if (p >= end) return 0;
    if (ks) { *ks = start; *kn = p - start; }
    x->p = p + 1;
    return 1;
}

#define MAX_CANONICAL_KEYS 64
#define MAX_CANONICAL_DEPTH 32

static int canonical_value(Text *x, int depth) {
    if (depth > MAX_CANONICAL_DEPTH || x->p >= x->end) return 0;
    unsigned char c = *x->p;
    if (c == '"') return canonical_string(x, NULL, NULL);
    if (c == '{') {
        const unsigned char *keys[MAX_CANONICAL_KEYS];
        Py_ssize_t lens[MAX_CANONICAL_KEYS];
        int nkeys = 0;
        x->p++;
        if (x->p < x->end && *x->p == '}') { x->p++; return 1; }
        for (;;) {
            const unsigned char *k;
            Py_ssize_t kn;
            if (nkeys == MAX_CANONICAL_KEYS || !canonical_string(x, &k, &kn)) return 0;
            /* JavaScript moves array-index keys first; "__proto__" is special */
            if (kn > 0 && k[0] >= '0' && k[0] <= '9') return 0;
            if (kn == 9 && memcmp(k, "__proto__", 9) == 0) return 0;
            for (int i = 0; i < nkeys; i++)
                if (lens[i] == kn && memcmp(keys[i], k, (size_t)kn) == 0) return 0;
            keys[nkeys] = k;
            lens[nkeys++] = kn;
            if (x->p >= x->end || *x->p != ':') return 0;
            x->p++;
            if (!canonical_value(x, depth + 1)) return 0;
            if (x->p >= x->end) return 0;
            if (*x->p == '}') { x->p++; return 1; }
            if (*x->p != ',') return 0;
            x->p++;
        }
    }
    if (c == '[') {
        x->p++;
        if (x->p < x->end && *x->p == ']') { x->p++; return 1; }
        for (;;) {
            if (!canonical_value(x, depth + 1) || x->p >= x->end) return 0;
            if (*x->p == ']') { x->p++; return 1; }
            if (*x->p != ',') return 0;
            x->p++;
        }
    }
    if (c == 't') return x->end - x->p >= 4 && memcmp(x->p, "true", 4) == 0 ? (x->p += 4, 1) : 0;
    if (c == 'f') return x->end - x->p >= 5 && memcmp(x->p, "false", 5) == 0 ? (x->p += 5, 1) : 0;
    if (c == 'n') return x->end - x->p >= 4 && memcmp(x->p, "null", 4) == 0 ? (x->p += 4, 1) : 0;
    const unsigned char *p = x->p, *digits;
    if (*p == '-') p++;
    digits = p;
    while (p < x->end && *p >= '0' && *p <= '9') p++;
    Py_ssize_t nd = p - digits;
    if (nd == 0 || nd > 15 || (digits[0] == '0' && (nd > 1 || digits != x->p))) return 0; /* also "-0" */
    if (p < x->end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
    x->p = p;
    return 1;
}

static int text_object(int t, Text *x, Buf *b, int *truthy, int depth, int type_done);

static inline int varint_len(uint64_t v) {
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

/* Key order, as Python sorts str (code points: UTF-8 bytes, a prefix first)
 * and as upb's deterministic serialization orders a map's string keys (a
 * prefix after the keys it begins: "ab" before "a"). */
static int py_before(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn) {
    Py_ssize_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, (size_t)m) : 0;
    return c < 0 || (c == 0 && an < bn);
}

static int upb_before(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn) {
    Py_ssize_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, (size_t)m) : 0;
    return c < 0 || (c == 0 && an > bn);
}

#define FIDELITY_KEYS 32

typedef struct {
    Py_ssize_t start, len, key, kn; /* the entry's bytes and its key's, in the body */
} Span;

/* A fidelity object's google.protobuf.Struct body, for the shape the
 * Python codec keeps as the Struct and at most a key order: a flat object,
 * each value a string, true, false or null, keys distinct and without NUL
 * (the elided marker). Keys out of sorted order get the envelope hint the
 * Python codec records (a KeyOrder at "/payload/<key>", source order),
 * for a payload's fidelity only. Numbers (JavaScript's number text),
 * nesting and the rest decline. The entries are written in upb's
 * deterministic map order. The '{' was read by the caller. */
static int text_fidelity(Text *x, Buf *b, const FieldText *ft, int depth) {
    Buf body = {0}, key = {0};
    Span spans[FIDELITY_KEYS];
    int count = 0, ok = 0, py_sorted = 1, upb_sorted = 1;
    if (eat(x, '}')) return 1;
    for (;;) {
        const char *k, *s = NULL;
        Py_ssize_t kn, n = 0;
        if (count == FIDELITY_KEYS || !scan_string(x, &k, &kn) || memchr(k, 0, (size_t)kn)) goto done;
        key.len = 0;
        if (!put_raw(&key, k, kn) || !eat(x, ':')) goto done;
        int c = peek(x), kind;
        if (c == '"') {
            if (!scan_string(x, &s, &n)) goto done;
            if (x->fidelity_long > 0 && n >= x->fidelity_long) goto done;
            kind = 3;
        } else if (c == 't') { if (!scan_literal(x, "true", 4)) goto done; kind = 4; n = 1; }
        else if (c == 'f') { if (!scan_literal(x, "false", 5)) goto done; kind = 4; n = 0; }
        else if (c == 'n') { if (!scan_literal(x, "null", 4)) goto done; kind = 1; n = 0; }
        else goto done;
        uint64_t value_len = kind == 3 ? 1 + (uint64_t)varint_len((uint64_t)n) + (uint64_t)n : 2;
        uint64_t entry_len = 1 + (uint64_t)varint_len((uint64_t)kn) + (uint64_t)kn
                             + 1 + (uint64_t)varint_len(value_len) + value_len;
        Span *sp = &spans[count];
        sp->start = body.len;
        sp->kn = kn;
        if (put_varint(&body, (1u << 3) | 2) < 0 || put_varint(&body, entry_len) < 0) goto done;
        sp->key = body.len + 1 + varint_len((uint64_t)kn);
        if (put_bytes(&body, 1, key.data ? key.data : "", kn) < 0) goto done;
        if (put_varint(&body, (2u << 3) | 2) < 0 || put_varint(&body, value_len) < 0) goto done;
        if (kind == 3) { if (put_bytes(&body, 3, s, n) < 0) goto done; }
        else if (put_int(&body, (uint32_t)kind, n) < 0) goto done;
        sp->len = body.len - sp->start;
        for (int i = 0; i < count; i++) /* the same key twice: the Python codec */
            if (spans[i].kn == kn && memcmp(body.data + spans[i].key, body.data + sp->key, (size_t)kn) == 0)
                goto done;
        if (count) {
            const Span *pr = &spans[count - 1];
            py_sorted &= py_before(body.data + pr->key, pr->kn, body.data + sp->key, kn);
            upb_sorted &= upb_before(body.data + pr->key, pr->kn, body.data + sp->key, kn);
        }
        count++;
        if (eat(x, '}')) break;
        if (!eat(x, ',')) goto done;
    }
    if (!py_sorted) { /* the key order as an envelope hint, as the Python codec records it */
        Buf *h = &x->hint;
        if (depth != 0 || x->hinted) goto done;
        if (!put_raw(h, "\x0a", 1) || put_varint(h, 9 + (uint64_t)ft->key_len) < 0
            || !put_raw(h, "/payload/", 9) || !put_raw(h, ft->key, ft->key_len))
            goto done;
        for (int i = 0; i < count; i++)
            if (put_bytes(h, 2, body.data + spans[i].key, spans[i].kn) < 0) goto done;
        x->hinted = 1;
    }
    if (upb_sorted) {
        if (count && !put_raw(b, body.data, body.len)) goto done;
    } else {
        int order[FIDELITY_KEYS];
        for (int i = 0; i < count; i++) {
            int at = i;
            while (at > 0 && upb_before(body.data + spans[i].key, spans[i].kn,
                                        body.data + spans[order[at - 1]].key, spans[order[at - 1]].kn)) {
                order[at] = order[at - 1];
                at--;
            }
            order[at] = i;
        }
        for (int i = 0; i < count; i++)
            if (!put_raw(b, body.data + spans[order[i]].start, spans[order[i]].len)) goto done;
    }
    ok = !b->failed && !x->hint.failed;
done:
    PyMem_Free(body.data);
    PyMem_Free(key.data);
    return ok;
}

static int text_field(int t, int i, Text *x, Buf *b, int *truthy, int depth) {
    const Field *f = &tables[t].fields[i];
    const FieldText *ft = &table_text[t].fields[i];
    const char *s;
    Py_ssize_t n;
    int64_t iv;
    switch (f->kind) {
    case K_ENUM:
        if (!scan_string(x, &s, &n)) return 0;
        for (int j = 0; j < ft->nlabels; j++) {
            if (ft->labels[j].len == n && memcmp(ft->labels[j].label, s, (size_t)n) == 0) {
                iv = ft->labels[j].value;
                if (iv) { *truthy = 1; if (put_int(b, f->number, iv) < 0) return 0; }
                return 1;
            }
        }
        return 0;
    case K_NUMLABEL:
        if (peek(x) == '"') {
            if (!scan_string(x, &s, &n)) return 0;
            *truthy |= n > 0;
            return put_bytes(b, f->number2, s, n) < 0 ? 0 : 1;
        }
        if (!scan_int(x, &iv)) return 0;
        *truthy |= iv != 0;
        return put_int(b, f->number, iv) < 0 ? 0 : 1;
    case K_INT:
        if (!scan_int(x, &iv)) return 0;
        *truthy |= iv != 0;
        if (iv || f->presence) return put_int(b, f->number, iv) < 0 ? 0 : 1;
        return 1;
    case K_STR:
        if (peek(x) == 'n') {
            if (!f->nullable || !scan_literal(x, "null", 4)) return 0;
            return f->required ? 1 : 0;
        }
        if (!scan_string(x, &s, &n)) return 0;
        *truthy |= n > 0;
        if (n || f->presence) return put_bytes(b, f->number, s, n) < 0 ? 0 : 1;
        return 1;
    case K_STRLIST: {
        if (!eat(x, '[')) return 0;
        if (eat(x, ']')) return f->required ? 1 : 0;
        *truthy = 1;
        do {
            if (!scan_string(x, &s, &n) || put_bytes(b, f->number, s, n) < 0) return 0;
        } while (eat(x, ','));
        return eat(x, ']');
    }
    case K_JSONTEXT: {
        skip_ws(x);
        const unsigned char *start = x->p;
        if (x->p >= x->end || *x->p != '{' || !canonical_value(x, 0)) return 0;
        *truthy = 1;
        return put_bytes(b, f->number, (const char *)start, x->p - start) < 0 ? 0 : 1;
    }
    case K_NESTED: {
        if (depth >= MAX_NESTING) return 0;
        if (f->many) {
            if (!eat(x, '[')) return 0;
            if (eat(x, ']')) return f->required ? 1 : 0;
            *truthy = 1;
            do {
                Buf sub = {0};
                int any = 0;
                int r = text_object(f->sub, x, &sub, &any, depth + 1, 0);
                if (r == 1 && put_bytes(b, f->number, sub.data ? sub.data : "", sub.len) < 0) r = 0;
                PyMem_Free(sub.data);
                if (!r) return 0;
            } while (eat(x, ','));
            return eat(x, ']');
        }
        Buf sub = {0};
        int any = 0;
        int r = text_object(f->sub, x, &sub, &any, depth + 1, 0);
        if (r == 1 && any) { /* all zeros stays unset, as the Python codec leaves it */
            *truthy = 1;
            if (put_bytes(b, f->number, sub.data ? sub.data : "", sub.len) < 0) r = 0;
        }
        PyMem_Free(sub.data);
        return r;
    }
    case K_FIDELITY: {
        if (!eat(x, '{')) return 0;
        *truthy = 1;
        Buf sub = {0};
        int r = text_fidelity(x, &sub, ft, depth);
        if (r && put_bytes(b, f->number, sub.data ? sub.data : "", sub.len) < 0) r = 0;
        PyMem_Free(sub.data);
        return r;
    }
    default: /* anything new: the Python codec decides */
        return 0;
    }
}

/* One object of table t. type_done: its '{' and a leading "type" member
 * were read by the caller (the payload, whose type picks the table). */
static int text_object(int t, Text *x, Buf *b, int *truthy, int depth, int type_done) {
    const Table *tab = &tables[t];
    const TableText *tt = &table_text[t];
    int last = -1, required = 0;
    if (type_done) {
        last = 0;
        if (eat(x, '}')) goto end;
        if (!eat(x, ',')) return 0;
    } else {
        if (!eat(x, '{')) return 0;
        if (eat(x, '}')) goto end;
    }
    for (;;) {
        const char *k, *s;
        Py_ssize_t kn, n;
        if (!scan_string(x, &k, &kn)) return 0;
        int found = -1;
        if (tt->type_text && kn == 4 && memcmp(k, "type", 4) == 0) {
            if (last >= 0 || !eat(x, ':') || !scan_string(x, &s, &n)) return 0;
            if (n != tt->type_len || memcmp(s, tt->type_text, (size_t)n) != 0) return 0;
            last = 0;
        } else {
            for (int i = 0; i < tab->nfields; i++) {
                if (table_text[t].fields[i].key_len == kn && memcmp(table_text[t].fields[i].key, k, (size_t)kn) == 0) {
                    found = i;
                    break;
                }
            }
            if (found < 0 || last >= found + 1 || !eat(x, ':')) return 0;
            last = found + 1;
            required += tab->fields[found].required;
            if (!text_field(t, found, x, b, truthy, depth)) return 0;
        }
        if (eat(x, '}')) break;
        if (!eat(x, ',')) return 0;
    }
end:
    return required == tab->nrequired && !b->failed;
}

static int key_is(Text *x, const char *want, Py_ssize_t wn) {
    const char *k;
    Py_ssize_t kn;
    return scan_string(x, &k, &kn) && kn == wn && memcmp(k, want, (size_t)wn) == 0 && eat(x, ':');
}

/* One message's JSON text -> its wire bytes appended to out; 1, or 0 (declined). */
static int text_message_with(const unsigned char *data, Py_ssize_t len, Buf *out, Py_ssize_t fidelity_long) {
    Text x = {data, data + len, {0}, fidelity_long, {0}, 0};
    Buf payload = {0};
    const char *s;
    Py_ssize_t n;
    int ok = 0, any = 0;
    Py_ssize_t mark = out->len;
    uint32_t arm = 0;
    if (len > MAX_BYTES || !eat(&x, '{') || !key_is(&x, "timestamp", 9) || !scan_string(&x, &s, &n)) goto done;
    if (n && put_bytes(out, f_timestamp, s, n) < 0) goto done;
    if (!eat(&x, ',') || !key_is(&x, "type", 4) || !scan_string(&x, &s, &n)) goto done;
    /* the envelope type is needed after the payload's; keep a copy */
    char envelope[64];
    if (n > (Py_ssize_t)sizeof envelope) goto done;
    memcpy(envelope, s, (size_t)n);
    Py_ssize_t envelope_len = n;
    if (!eat(&x, ',') || !key_is(&x, "payload", 7)) goto done;
    const ArmText *session = &arm_text[arm_session_meta];
    if (session->envelope && envelope_len == session->envelope_len
        && memcmp(envelope, session->envelope, (size_t)n) == 0) {
        arm = arm_session_meta;
        if (!text_object(arms[arm].table, &x, &payload, &any, 0, 0)) goto done;
    } else {
        if (!eat(&x, '{') || !key_is(&x, "type", 4) || !scan_string(&x, &s, &n)) goto done;
        for (int i = 0; i < narm_types; i++)
            if (arm_types[i].len == n && memcmp(arm_types[i].type_text, s, (size_t)n) == 0) { arm = arm_types[i].arm; break; }
        if (!arm || arm == arm_session_meta) goto done;
        if (!text_object(arms[arm].table, &x, &payload, &any, 0, 1)) goto done;
    }
    if (arm_text[arm].envelope_len != envelope_len || memcmp(arm_text[arm].envelope, envelope, (size_t)envelope_len) != 0)
        goto done;
    if (eat(&x, ',')) {
        if (!key_is(&x, "origin", 6) || !eat(&x, '[') || eat(&x, ']')) goto done;
        do {
            if (!scan_string(&x, &s, &n) || put_bytes(out, f_origin, s, n) < 0) goto done;
        } while (eat(&x, ','));
        if (!eat(&x, ']')) goto done;
    }
    if (!eat(&x, '}')) goto done;
    skip_ws(&x);
    if (x.p != x.end) goto done;
    if (put_bytes(out, arm, payload.data ? payload.data : "", payload.len) < 0) goto done;
    if (x.hinted && put_bytes(out, f_hint1, x.hint.data, x.hint.len) < 0) goto done; /* key_orders */
    ok = !out->failed;
done:
    if (!ok) { out->len = mark; out->failed = 0; }
    PyMem_Free(payload.data);
    PyMem_Free(x.scratch.data);
    PyMem_Free(x.hint.data);
    return ok;
}

/* One message through a text path: bytes, or None when it declined. */
static PyObject *one_message(PyObject *arg, int (*convert)(const unsigned char *, Py_ssize_t, Buf *)) {
    Py_buffer view;
    if (ntables < 0) Py_RETURN_NONE;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Buf out = {0};
    PyObject *result;
    if (convert(view.buf, view.len, &out)) result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    else result = Py_NewRef(Py_None);
    PyMem_Free(out.data);
    PyBuffer_Release(&view);
    return result;
}

static int text_message(const unsigned char *data, Py_ssize_t len, Buf *out) {
    return text_message_with(data, len, out, 0);
}

static PyObject *py_encode_text(PyObject *self, PyObject *arg) { return one_message(arg, text_message); }

/* ---- wire -> JSON text -------------------------------------------------- */

typedef struct {
    int field, second;
    uint64_t v;
    const unsigned char *s;
} Occ;

/* The key order hint of a payload's fidelity (a KeyOrder's keys), or NULL. */
typedef struct {
    const unsigned char *order; /* the KeyOrder message's bytes */
    uint64_t order_len;
    int used;
} Hint;

static int wire_object(int t, const unsigned char *p, Py_ssize_t n, Buf *out, int depth, Hint *hint);

/* The JSON Schema text of a K_JSONTEXT field, when it is already what the
 * Python codec would write (else the Python codec decides). */
static int put_schema_text(Buf *out, const unsigned char *s, uint64_t n) {
    Text x = {s, s + n, {0}};
    if (!n || *s != '{' || !canonical_value(&x, 0) || x.p != x.end) return 0;
    return put_raw(out, (const char *)s, (Py_ssize_t)n);
}

static int put_enum(Buf *out, const FieldText *ft, int32_t v) {
    for (int j = 0; j < ft->nlabels; j++)
        if (ft->labels[j].value == v)
            return put_json_string(out, (const unsigned char *)ft->labels[j].label, ft->labels[j].len);
    return put_decimal(out, v); /* a number from a newer schema stays a number */
}

/* A fidelity Struct's JSON as the Python codec writes one without hints or
 * fidelity_json (its canonical view, keys sorted), for the shape
 * text_fidelity writes: each value a string, a boolean or null. The
 * entries may come in any order (protobuf's own serialization of a map is
 * in hash order unless asked to be deterministic); they are sorted here by
 * key, in UTF-8 byte order (Python's order of the keys' code points). A key
 * twice, more than FIDELITY_KEYS keys, other values: the Python codec. */
#define FIDELITY_KEYS 32

typedef struct {
    const unsigned char *k, *v;
    uint64_t kn, vn;
} Entry;

static int key_before(const Entry *a, const Entry *b) {
    uint64_t m = a->kn < b->kn ? a->kn : b->kn;
    int c = m ? memcmp(a->k, b->k, (size_t)m) : 0;
    return c < 0 || (c == 0 && a->kn < b->kn);
}

static int put_fidelity(Buf *out, const unsigned char *p, uint64_t n, const Hint *hint) {
    Reader r = {p, p + n};
    Entry entries[FIDELITY_KEYS];
    int count = 0;
    uint32_t number;
    int wire;
    while (r.p < r.end) {
        uint64_t v = 0;
        const unsigned char *s = NULL;
        if (count == FIDELITY_KEYS) return 0;
        if (!get_field(&r, &number, &wire, &v, &s) || number != 1 || wire != 2) return 0;
        Reader e = {s, s + v};
        Entry en = {0};
        if (!get_field(&e, &number, &wire, &en.kn, &en.k) || number != 1 || wire != 2) return 0;
        if (!get_field(&e, &number, &wire, &en.vn, &en.v) || number != 2 || wire != 2 || e.p != e.end) return 0;
        if (memchr(en.k, 0, (size_t)en.kn) || !utf8_valid(en.k, (Py_ssize_t)en.kn)) return 0;
        int at = count++;
        while (at > 0 && key_before(&en, &entries[at - 1])) { entries[at] = entries[at - 1]; at--; }
        entries[at] = en;
        if (at > 0 && !key_before(&entries[at - 1], &en)) return 0; /* the same key twice */
        if (at + 1 < count && !key_before(&en, &entries[at + 1])) return 0;
    }
    int order[FIDELITY_KEYS];
    for (int i = 0; i < count; i++) order[i] = i;
    if (hint) {
        /* the keys in the hint's order: exactly the Struct's keys, each once
         * (anything else, an edit since, is the Python codec's to merge) */
        Reader h = {hint->order, hint->order + hint->order_len};
        unsigned taken = 0;
        int listed = 0;
        while (h.p < h.end) {
            uint64_t kn = 0;
            const unsigned char *k = NULL;
            if (!get_field(&h, &number, &wire, &kn, &k) || wire != 2) return 0;
            if (number == 1) continue; /* the path, checked by the caller */
            if (number != 2 || listed == count) return 0;
            int found = -1;
            for (int i = 0; i < count; i++)
                if (!(taken & (1u << i)) && entries[i].kn == kn && memcmp(entries[i].k, k, (size_t)kn) == 0) {
                    found = i;
                    break;
                }
            if (found < 0) return 0;
            taken |= 1u << found;
            order[listed++] = found;
        }
        if (listed != count) return 0;
    }
    if (!put_char(out, '{')) return 0;
    for (int j = 0; j < count; j++) {
        int i = order[j];
        Reader w = {entries[i].v, entries[i].v + entries[i].vn};
        uint64_t x = 0;
        const unsigned char *xs = NULL;
        if (!get_field(&w, &number, &wire, &x, &xs) || w.p != w.end) return 0;
        if ((j && !put_char(out, ',')) || !put_json_string(out, entries[i].k, (Py_ssize_t)entries[i].kn)
            || !put_char(out, ':'))
            return 0;
        if (number == 3 && wire == 2) {
            if (!utf8_valid(xs, (Py_ssize_t)x) || !put_json_string(out, xs, (Py_ssize_t)x)) return 0;
        } else if (number == 4 && wire == 0 && x <= 1) {
            if (!(x ? put_raw(out, "true", 4) : put_raw(out, "false", 5))) return 0;
        } else if (number == 1 && wire == 0 && x == 0) {
            if (!put_raw(out, "null", 4)) return 0;
        } else {
            return 0; /* numbers, nesting: the Python codec */
        }
    }
    return put_char(out, '}');
}

static int emit_field(int t, int i, const Occ *occ, int nocc, Buf *out, int depth, Hint *hint) {
    const Field *f = &tables[t].fields[i];
    const FieldText *ft = &table_text[t].fields[i];
    const Occ *one = NULL;
    int count = 0;
    for (int j = 0; j < nocc; j++) if (occ[j].field == i) { if (!one) one = &occ[j]; count++; }
    #define KEY() (put_raw(out, ft->json_key, ft->json_key_len))
    switch (f->kind) {
    case K_ENUM:
        if (one && (int32_t)(uint32_t)one->v != 0) return KEY() && put_enum(out, ft, (int32_t)(uint32_t)one->v);
        return 1;
    case K_NUMLABEL:
        if (!one) return 1;
        if (one->second) return KEY() && put_json_string(out, one->s, (Py_ssize_t)one->v);
        return KEY() && put_decimal(out, (int64_t)one->v);
    case K_INT:
        if (f->presence) return one ? KEY() && put_decimal(out, (int64_t)one->v) : 1;
        if (f->required || (one && one->v != 0)) return KEY() && put_decimal(out, one ? (int64_t)one->v : 0);
        return 1;
    case K_STR:
        if (f->presence) {
            if (one) return KEY() && put_json_string(out, one->s, (Py_ssize_t)one->v);
            if (f->nullable && f->required) return KEY() && put_raw(out, "null", 4);
            return 1;
        }
        if (f->required || (one && one->v)) {
            if (!KEY()) return 0;
            return one ? put_json_string(out, one->s, (Py_ssize_t)one->v) : put_raw(out, "\"\"", 2);
        }
        return 1;
    case K_JSONTEXT:
        if (one && one->v) return KEY() && put_schema_text(out, one->s, one->v);
        return 1;
    case K_STRLIST:
    case K_NESTED:
        if (f->kind == K_NESTED && !f->many) {
            if (depth >= MAX_NESTING || !KEY()) return 0;
            return one ? wire_object(f->sub, one->s, (Py_ssize_t)one->v, out, depth + 1, NULL)
                       : wire_object(f->sub, (const unsigned char *)"", 0, out, depth + 1, NULL);
        }
        if (!count && !f->required) return 1;
        if (!KEY() || !put_char(out, '[')) return 0;
        for (int j = 0, k = 0; j < nocc; j++) {
            if (occ[j].field != i) continue;
            if (k++ && !put_char(out, ',')) return 0;
            int r = f->kind == K_STRLIST ? put_json_string(out, occ[j].s, (Py_ssize_t)occ[j].v)
                                         : (depth < MAX_NESTING && wire_object(f->sub, occ[j].s, (Py_ssize_t)occ[j].v, out, depth + 1, NULL));
            if (!r) return 0;
        }
        return put_char(out, ']');
    case K_FIDELITY:
        if (!one) return 1; /* absent: no key */
        if (hint) {
            /* the hint's path must be this field's: "/payload/<key>" */
            Reader h = {hint->order, hint->order + hint->order_len};
            uint32_t number;
            int wire;
            uint64_t pn = 0;
            const unsigned char *path = NULL;
            if (!get_field(&h, &number, &wire, &pn, &path) || number != 1 || wire != 2) return 0;
            if (pn != 9 + (uint64_t)ft->key_len || memcmp(path, "/payload/", 9) != 0
                || memcmp(path + 9, ft->key, (size_t)ft->key_len) != 0)
                return 0;
            hint->used = 1;
        }
        return KEY() && put_fidelity(out, one->s, one->v, hint);
    default:
        return 0;
    }
    #undef KEY
}

/* Writes object t's JSON (keys in reference order) for its wire bytes. */
static int wire_object(int t, const unsigned char *p, Py_ssize_t n, Buf *out, int depth, Hint *hint) {
    const Table *tab = &tables[t];
    Occ local[32], *occ = local;
    int nocc = 0, cap = 32, ok = 0;
    unsigned seen = 0; /* singular fields read so far */
    Reader r = {p, p + n};
    if (depth > MAX_NESTING) return 0;
    while (r.p < r.end) {
        uint32_t number;
        int wire;
        uint64_t v = 0;
        const unsigned char *s = NULL;
        if (!get_field(&r, &number, &wire, &v, &s)) goto done;
        int found = -1, second = 0;
        for (int i = 0; i < tab->nfields; i++) {
            const Field *f = &tab->fields[i];
            if (f->number == number) { found = i; break; }
            if ((f->kind == K_NUMLABEL || f->kind == K_FIDELITY) && f->number2 == number) { found = i; second = 1; break; }
        }
        if (found < 0) goto done; /* unknown field: the Python codec decides */
        const Field *f = &tab->fields[found];
        int want = (f->kind == K_INT || f->kind == K_ENUM || (f->kind == K_NUMLABEL && !second)) ? 0 : 2;
        if (wire != want || (f->kind == K_FIDELITY && second)) goto done; /* fidelity_json: Python */
        if (!(f->kind == K_STRLIST || (f->kind == K_NESTED && f->many))) {
            if (seen & (1u << found)) goto done; /* a singular field twice */
            seen |= 1u << found;
        }
        if (nocc == cap) {
            Occ *grown = PyMem_Malloc(sizeof(Occ) * (size_t)cap * 2);
            if (!grown) goto done;
            memcpy(grown, occ, sizeof(Occ) * (size_t)nocc);
            if (occ != local) PyMem_Free(occ);
            occ = grown;
            cap *= 2;
        }
        occ[nocc++] = (Occ){found, second, v, s};
    }
    if (!put_char(out, '{')) goto done;
    Py_ssize_t open = out->len;
    if (table_text[t].json_type && !put_raw(out, table_text[t].json_type, table_text[t].json_type_len)) goto done;
    for (int i = 0; i < tab->nfields; i++) {
        Py_ssize_t before = out->len;
        if (before > open && !put_char(out, ',')) goto done;
        Py_ssize_t after_comma = out->len;
        if (!emit_field(t, i, occ, nocc, out, depth, hint)) goto done;
        if (out->len == after_comma) out->len = before; /* nothing written: no comma */
    }
    ok = put_char(out, '}') && !out->failed && (!hint || hint->used); /* a hint for nothing: Python */
done:
    if (occ != local) PyMem_Free(occ);
    return ok;
}

/* One message's wire bytes -> its JSON line (no newline) appended to out. */
static int wire_message(const unsigned char *p, Py_ssize_t n, Buf *out) {
    Reader r = {p, p + n};
    const unsigned char *ts = NULL, *payload = NULL;
    uint64_t ts_len = 0, payload_len = 0;
    uint32_t arm = 0;
    int norigin = 0;
    Hint hint = {NULL, 0, 0};
    Py_ssize_t mark = out->len;
    if (n > MAX_BYTES) return 0;
    while (r.p < r.end) {
        uint32_t number;
        int wire;
        uint64_t v = 0;
        const unsigned char *s = NULL;
        if (!get_field(&r, &number, &wire, &v, &s) || wire != 2) return 0;
        if (number == f_timestamp) {
            if (ts) return 0;
            ts = s;
            ts_len = v;
        } else if (number == f_origin) {
            norigin++;
        } else if (number <= MAX_ARMS && arms[number].envelope && !payload) {
            arm = number;
            payload = s;
            payload_len = v;
        } else if (number == f_hint1 && !hint.order) {
            hint.order = s; /* one key order, which must be a payload fidelity's */
            hint.order_len = v;
        } else {
            return 0; /* other hints, unknown payloads, unknown fields, a second arm */
        }
    }
    if (!payload) return 0;
    int ok = put_raw(out, "{\"timestamp\":", 13)
             && (ts ? put_json_string(out, ts, (Py_ssize_t)ts_len) : put_raw(out, "\"\"", 2))
             && put_char(out, ',')
             && put_raw(out, arm_text[arm].json_envelope, arm_text[arm].json_envelope_len)
             && put_raw(out, ",\"payload\":", 11)
             && wire_object(arms[arm].table, payload, (Py_ssize_t)payload_len, out, 0, hint.order ? &hint : NULL);
    if (ok && norigin) {
        ok = put_raw(out, ",\"origin\":[", 11);
        Reader again = {p, p + n};
        int k = 0;
        while (ok && again.p < again.end) {
            uint32_t number;
            int wire;
            uint64_t v = 0;
            const unsigned char *s = NULL;
            if (!get_field(&again, &number, &wire, &v, &s)) { ok = 0; break; } /* read once already */
            if (number != f_origin) continue;
            ok = (!k++ || put_char(out, ',')) && put_json_string(out, s, (Py_ssize_t)v);
        }
        ok = ok && put_char(out, ']');
    }
    ok = ok && put_char(out, '}') && !out->failed;
    if (!ok) { out->len = mark; out->failed = 0; }
    return ok;
}

static PyObject *py_decode_text(PyObject *self, PyObject *arg) { return one_message(arg, wire_message); }

/* ---- whole traces ------------------------------------------------------- */

/* Converts whole records of a buffer until one needs the Python codec (or
 * the buffer ends): returns (output bytes, offset of the first line or frame
 * not converted, count of records converted; blank lines are passed over).
 * The caller converts that one with the Python codec, which names any error
 * and keeps the tolerant reader's rules, and calls again. */

static PyObject *batch_result(Buf *out, Py_ssize_t pos, Py_ssize_t count) {
    PyObject *bytes = out->failed ? NULL : PyBytes_FromStringAndSize(out->data ? out->data : "", out->len);
    PyMem_Free(out->data);
    if (!bytes) { if (!PyErr_Occurred()) PyErr_NoMemory(); return NULL; }
    return Py_BuildValue("(Nnn)", bytes, pos, count);
}

static inline int ascii_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Flushes the output at this size: the caller writes it out, and memory
 * stays bounded whatever the input buffer holds. */
#define BATCH_OUT_BYTES (4 * 1024 * 1024)

static PyObject *py_jsonl_to_binpb(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_line, fidelity_long;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &pos, &max_line, &fidelity_long)) return NULL;
    Buf out = {0};
    Py_ssize_t records = 0;
    const unsigned char *base = view.buf, *end = base + view.len;
    if (pos < 0 || pos > view.len) pos = view.len;
    while (ntables >= 0 && pos < view.len && out.len < BATCH_OUT_BYTES) {
        const unsigned char *line = base + pos;
        const unsigned char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) break; /* an unterminated last line: the Python reader decides */
        if (nl - line > max_line) break;
        const unsigned char *a = line, *z = nl;
        while (a < z && ascii_space(*a)) a++;
        while (z > a && ascii_space(z[-1])) z--;
        if (a < z) {
            if (*a >= 0x80 || z[-1] >= 0x80) break; /* JavaScript's trim() knows more spaces */
            Py_ssize_t mark = out.len;
            if (put_varint(&out, 0) < 0) break;
            Py_ssize_t body = out.len;
            if (!text_message_with(a, z - a, &out, fidelity_long)) { out.len = mark; out.failed = 0; break; }
            /* the length prefix, now that it is known */
            Py_ssize_t size = out.len - body;
            char prefix[10];
            int k = varint_at(prefix, (uint64_t)size);
            if (buf_reserve(&out, k) < 0) { out.len = mark; out.failed = 0; break; }
            memmove(out.data + mark + k, out.data + body, (size_t)size);
            memcpy(out.data + mark, prefix, (size_t)k);
            out.len = mark + k + size;
            records++;
        }
        pos = nl + 1 - base;
    }
    PyBuffer_Release(&view);
    return batch_result(&out, pos, records);
}

static PyObject *py_binpb_to_jsonl(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_frame;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &max_frame)) return NULL;
    Buf out = {0};
    Py_ssize_t records = 0;
    const unsigned char *base = view.buf;
    if (pos < 0 || pos > view.len) pos = view.len;
    while (ntables >= 0 && pos < view.len && out.len < BATCH_OUT_BYTES) {
        Reader r = {base + pos, base + view.len};
        uint64_t size;
        if (!get_varint(&r, &size) || size > (uint64_t)max_frame || size > (uint64_t)(r.end - r.p)) break;
        Py_ssize_t mark = out.len;
        if (!wire_message(r.p, (Py_ssize_t)size, &out) || !put_char(&out, '\n')) {
            out.len = mark; /* over the output limit: the Python codec takes this one */
            out.failed = 0;
            break;
        }
        pos = (r.p + size) - base;
        records++;
    }
    PyBuffer_Release(&view);
    return batch_result(&out, pos, records);
}

/* Builds the C views of the tables (called once by configure()). */
static char *json_fragment(const char *prefix, const char *s, Py_ssize_t n, const char *suffix, Py_ssize_t *len) {
    Buf b = {0};
    if (!put_raw(&b, prefix, (Py_ssize_t)strlen(prefix)) || !put_json_string(&b, (const unsigned char *)s, n)
        || !put_raw(&b, suffix, (Py_ssize_t)strlen(suffix))) {
        PyMem_Free(b.data);
        PyErr_SetString(PyExc_ValueError, "a name that is not valid UTF-8");
        return NULL;
    }
    *len = b.len;
    return b.data;
}

static int configure_text(PyObject *by_type) {
    for (int t = 0; t < ntables; t++) {
        Table *tab = &tables[t];
        TableText *tt = &table_text[t];
        if (tab->type_text) {
            if (!(tt->type_text = PyUnicode_AsUTF8AndSize(tab->type_text, &tt->type_len))) return -1;
            if (!(tt->json_type = json_fragment("\"type\":", tt->type_text, tt->type_len, "", &tt->json_type_len))) return -1;
        }
        for (int i = 0; i < tab->nfields; i++) {
            Field *f = &tab->fields[i];
            FieldText *ft = &tt->fields[i];
            if (!(ft->key = PyUnicode_AsUTF8AndSize(f->key, &ft->key_len))) return -1;
            if (!(ft->json_key = json_fragment("", ft->key, ft->key_len, ":", &ft->json_key_len))) return -1;
            if (f->kind != K_ENUM) continue;
            Py_ssize_t n = PyDict_GET_SIZE(f->to_number), pos = 0;
            PyObject *label, *value;
            ft->labels = PyMem_Calloc((size_t)n + 1, sizeof(Label));
            if (!ft->labels) { PyErr_NoMemory(); return -1; }
            while (PyDict_Next(f->to_number, &pos, &label, &value)) {
                Label *l = &ft->labels[ft->nlabels];
                if (!PyUnicode_Check(label) || !(l->label = PyUnicode_AsUTF8AndSize(label, &l->len))) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "enum labels are str");
                    return -1;
                }
                l->value = PyLong_AsLongLong(value);
                if (l->value == -1 && PyErr_Occurred()) return -1;
                /* the text a number is written as must be the one read back */
                PyObject *back = PyDict_GetItemWithError(f->to_text, value);
                if (!back || PyUnicode_Compare(back, label) != 0) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "enum tables disagree");
                    return -1;
                }
                ft->nlabels++;
            }
            if (PyDict_GET_SIZE(f->to_text) != n) { PyErr_SetString(PyExc_ValueError, "enum tables disagree"); return -1; }
        }
    }
    for (int a = 0; a <= MAX_ARMS; a++) {
        if (!arms[a].envelope) continue;
        ArmText *at = &arm_text[a];
        if (!(at->envelope = PyUnicode_AsUTF8AndSize(arms[a].envelope, &at->envelope_len))) return -1;
        if (at->envelope_len > 64) { PyErr_SetString(PyExc_ValueError, "envelope type too long"); return -1; }
        if (!(at->json_envelope = json_fragment("\"type\":", at->envelope, at->envelope_len, "", &at->json_envelope_len))) return -1;
    }
    Py_ssize_t n = PyDict_GET_SIZE(by_type), pos = 0;
    PyObject *key, *value;
    arm_types = PyMem_Calloc((size_t)n + 1, sizeof(ArmByType));
    if (!arm_types) { PyErr_NoMemory(); return -1; }
    while (PyDict_Next(by_type, &pos, &key, &value)) {
        ArmByType *e = &arm_types[narm_types];
        if (!PyUnicode_Check(key) || !(e->type_text = PyUnicode_AsUTF8AndSize(key, &e->len))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "payload types are str");
            return -1;
        }
        e->arm = (uint32_t)PyLong_AsUnsignedLong(value);
        if (PyErr_Occurred()) return -1;
        if (e->arm > MAX_ARMS || !arms[e->arm].envelope) { PyErr_SetString(PyExc_ValueError, "bad arm"); return -1; }
        narm_types++;
    }
    return 0;
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
            tab->nrequired += f->required;
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
    if (configure_text(by_type) < 0) { ntables = -1; return NULL; }
    Py_RETURN_NONE;
}

/* An engine's message dict as (wire bytes, JSON text) in one call: the text
   is read from the wire bytes just written, as decode_text would. None when
   the dict is not one the tables encode; (wire, None) when only the text path
   declined, so the caller never encodes twice. */
static PyObject *py_encode_with_text(PyObject *self, PyObject *obj) {
    PyObject *wire = py_encode(self, obj);
    if (wire == NULL || wire == Py_None) return wire;
    PyObject *text = one_message(wire, wire_message);
    if (text == NULL) {
        Py_DECREF(wire);
        return NULL;
    }
    return Py_BuildValue("(NN)", wire, text);
}

/* The frames of a block of delimited records that the writer's default form
 * may rewrite: (start, end, arm) of each body whose payload arm (the first
 * field after timestamp 1 and origin 3) is picked. `least` holds a
 * little-endian uint32 per payload field number: the least body size taken
 * for that arm, 0 for none. `holding` holds a byte per field number: 0, or
 * k to take only a record whose payload holds field k (a tool output with
 * images, a session_meta with tools). Python then looks at those alone
 * instead of walking every frame. A malformed frame ends the list there;
 * the caller's own walk names it. */
static PyObject *py_frames_of_arms(PyObject *self, PyObject *args) {
    Py_buffer view, least, holding;
    if (!PyArg_ParseTuple(args, "y*y*y*", &view, &least, &holding)) return NULL;
    PyObject *out = PyList_New(0);
    Reader r = {view.buf, (const unsigned char *)view.buf + view.len};
    const unsigned char *need = holding.buf;
    uint32_t narms = (uint32_t)(least.len / 4);
    while (out && r.p < r.end) {
        uint64_t length;
        if (!get_varint(&r, &length) || length > (uint64_t)(r.end - r.p)) break;
        const unsigned char *body = r.p;
        r.p += length;
        Reader f = {body, r.p};
        uint32_t number = 0;
        int wire = 0;
        uint64_t v = 0;
        const unsigned char *s = NULL;
        while (f.p < f.end) {
            if (!get_field(&f, &number, &wire, &v, &s)) { number = 0; break; }
            if (!((number == 1 || number == 3) && wire == 2)) break;
            number = 0;
        }
        if (!number || number >= narms) continue;
        uint32_t min;
        memcpy(&min, (const unsigned char *)least.buf + 4 * number, 4); /* little-endian hosts */
        if (!min || length < min) continue;
        if (number < (uint32_t)holding.len && need[number]) {
            if (wire != 2) continue;
            Reader sub = {s, s + v};
            uint32_t inner = 0;
            int found = 0, w;
            uint64_t iv;
            const unsigned char *is;
            while (sub.p < sub.end && get_field(&sub, &inner, &w, &iv, &is))
                if (inner == need[number]) { found = 1; break; }
            if (!found) continue;
        }
        PyObject *span = Py_BuildValue("(nnI)", (Py_ssize_t)(body - (const unsigned char *)view.buf),
                                       (Py_ssize_t)(r.p - (const unsigned char *)view.buf), number);
        if (!span || PyList_Append(out, span) < 0) { Py_XDECREF(span); Py_CLEAR(out); break; }
        Py_DECREF(span);
    }
    PyBuffer_Release(&holding);
    PyBuffer_Release(&least);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS, "Installs the tables built by _native.py (once)."},
    {"encode", py_encode, METH_O, "An orjson-parsed message as OmniMessage wire bytes, or None."},
    {"encode_with_text", py_encode_with_text, METH_O,
     "An orjson-parsed message as (wire bytes, JSON text or None), or None."},
    {"decode", py_decode, METH_O, "OmniMessage wire bytes as an orjson-ready dict, or None."},
    {"encode_text", py_encode_text, METH_O, "One message's JSON text as OmniMessage wire bytes, or None."},
    {"decode_text", py_decode_text, METH_O, "OmniMessage wire bytes as the message's JSON text, or None."},
    {"jsonl_to_binpb", py_jsonl_to_binpb, METH_VARARGS,
     "(data, pos, max_line, fidelity_long) -> (frames, next pos, records): whole JSONL lines as "
     "delimited records; a line with a fidelity string of fidelity_long bytes or more (when > 0) "
     "is left to the caller."},
    {"frames_of_arms", py_frames_of_arms, METH_VARARGS,
     "(frames, least sizes, held fields) -> [(start, end, arm)] of the bodies the default form may rewrite."},
    {"binpb_to_jsonl", py_binpb_to_jsonl, METH_VARARGS,
     "(data, pos, max_frame) -> (lines, next pos, records): delimited records as JSONL lines."},
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
    PyObject *m = PyModule_Create(&module);
    /* What _native.py checks before it calls anything: an extension built
     * from other source (a pull without reinstalling) has another number,
     * even where its functions keep their names. Raised with every change
     * of a function's arguments or of what it accepts. */
    if (m && PyModule_AddIntConstant(m, "SOURCE_VERSION", 3) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
