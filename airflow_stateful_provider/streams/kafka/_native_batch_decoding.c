/* The records of one v2 record batch as kafka-python ConsumerRecords, in C (batch_decoding.py).
 *
 * The Python decoder (batch_decoding.decode_batch) spends about 2 us a record in its loop: most
 * of a restoring thread's time. This is the same loop at about a tenth of that. It decodes only
 * well-formed batches: at any doubt (a length or size past the end, a varint over nine bytes, an
 * offset or timestamp past 64 bits, a header key that is not UTF-8) it returns None, and the
 * Python decoder decodes the batch again and names the fault, so records and errors stay its own
 * (tests/unit/streams/kafka/test_batch_decoding.py compares both on valid and damaged batches).
 *
 * Headers are tuples, as in the Python loop (kafka-python: lists), one shared empty tuple for a
 * record without any. A record then holds only strings, numbers, bytes, None and tuples of
 * those: it can never be part of a reference cycle, so it is untracked by the cyclic garbage
 * collector from the start (CPython untracks such tuples itself, but only at the first
 * collection each one survives, after traversing it). A restore holds ten thousand of them at a
 * time; tracked, the collector's passes over them cost as much as decoding them.
 *
 * decode_records(buffer, pos, count, topic, partition, leader_epoch, base_offset, first_timestamp,
 *                max_timestamp, timestamp_type, record_type) -> (records, size) | None
 * Record => Length Attributes TimestampDelta OffsetDelta KeyLength Key ValueLength Value Headers,
 * every integer a zigzag varint; a negative key or value length is a null key or value.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define RECORD_FIELDS 13
#define LOG_APPEND_TIME 1

typedef struct {
    const unsigned char *data;
    Py_ssize_t len;
    Py_ssize_t pos;
} Reader;

/* A zigzag varint of at most nine bytes (63 bits: every value kafka-python decodes alike). */
static int read_varint(Reader *r, int64_t *out) {
    uint64_t u = 0;
    for (int shift = 0; shift < 63; shift += 7) {
        if (r->pos >= r->len) return 0;
        unsigned char b = r->data[r->pos++];
        u |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 1;
        }
    }
    return 0;
}

/* ``size`` bytes at the reader's position as bytes (a negative size: None); 0 past the end. */
static int read_bytes(Reader *r, int64_t size, PyObject **out) {
    if (size < 0) {
        Py_INCREF(Py_None);
        *out = Py_None;
        return 1;
    }
    if (size > r->len - r->pos) return 0;
    *out = PyBytes_FromStringAndSize((const char *)r->data + r->pos, (Py_ssize_t)size);
    if (*out == NULL) return -1;
    r->pos += (Py_ssize_t)size;
    return 1;
}

static PyObject *no_headers;  /* the empty tuple */

/* The headers tuple and their serialized size (-1 without headers); 0: doubt, -1: error set. */
static int read_headers(Reader *r, PyObject **headers, int64_t *header_size) {
    int64_t count;
    if (!read_varint(r, &count) || count < 0) return 0;
    if (count == 0) {
        *headers = Py_NewRef(no_headers);
        *header_size = -1;
        return 1;
    }
    if (count > r->len - r->pos) return 0;  /* each header takes two bytes at least */
    *headers = PyTuple_New((Py_ssize_t)count);
    if (*headers == NULL) return -1;
    *header_size = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t key_size, value_size;
        if (!read_varint(r, &key_size) || key_size < 0 || key_size > r->len - r->pos) goto doubt;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)r->data + r->pos, (Py_ssize_t)key_size, "strict");
        if (key == NULL) {
            PyErr_Clear();  /* not UTF-8: the Python decoder names it */
            goto doubt;
        }
        r->pos += (Py_ssize_t)key_size;
        PyObject *value = NULL;
        int got = read_varint(r, &value_size) ? read_bytes(r, value_size, &value) : 0;
        if (got != 1) {
            Py_DECREF(key);
            if (got < 0) goto error;
            goto doubt;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL) goto error;
        PyObject_GC_UnTrack(pair);  /* a string and bytes or None */
        PyTuple_SET_ITEM(*headers, (Py_ssize_t)i, pair);
        *header_size += key_size + (value_size > 0 ? value_size : 0);
    }
    PyObject_GC_UnTrack(*headers);  /* untracked pairs */
    return 1;
doubt:
    Py_CLEAR(*headers);
    return 0;
error:
    Py_CLEAR(*headers);
    return -1;
}

static PyObject *decode_records(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    long long count, base_offset, first_timestamp, max_timestamp;
    int timestamp_type;
    PyObject *topic, *partition, *leader_epoch, *record_type_object;
    if (!PyArg_ParseTuple(args, "y*nLOOOLLLiO", &view, &pos, &count, &topic, &partition, &leader_epoch,
                          &base_offset, &first_timestamp, &max_timestamp, &timestamp_type, &record_type_object))
        return NULL;
    PyTypeObject *record_type = (PyTypeObject *)record_type_object;
    if (!PyType_Check(record_type_object) || !PyType_IsSubtype(record_type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple type (kafka-python's ConsumerRecord)");
        return NULL;
    }
    /* the records hold these three as they are: untracked only if these cannot be in a cycle */
    int untrack = !PyObject_GC_IsTracked(topic) && !PyObject_GC_IsTracked(partition)
                  && !PyObject_GC_IsTracked(leader_epoch);
    Reader r = {(const unsigned char *)view.buf, view.len, pos};
    PyObject *records = PyList_New(0);
    PyObject *type_object = PyLong_FromLong(timestamp_type);
    int64_t size = 0;
    if (records == NULL || type_object == NULL) goto error;
    if (r.pos < 0 || r.pos > r.len) goto doubt;
    for (long long i = 0; i < count; i++) {
        int64_t length, unused, timestamp_delta, offset_delta, key_size, value_size, header_size;
        int64_t offset, timestamp;
        if (!read_varint(&r, &length)) goto doubt;
        Py_ssize_t record_start = r.pos;
        if (!read_varint(&r, &unused) || !read_varint(&r, &timestamp_delta) || !read_varint(&r, &offset_delta))
            goto doubt;
        if (__builtin_add_overflow((int64_t)base_offset, offset_delta, &offset)) goto doubt;
        if (timestamp_type == LOG_APPEND_TIME) timestamp = max_timestamp;
        else if (__builtin_add_overflow((int64_t)first_timestamp, timestamp_delta, &timestamp)) goto doubt;
        PyObject *key = NULL, *value = NULL, *headers = NULL;
        int got = read_varint(&r, &key_size) ? read_bytes(&r, key_size, &key) : 0;
        if (got == 1) got = read_varint(&r, &value_size) ? read_bytes(&r, value_size, &value) : 0;
        if (got == 1) got = read_headers(&r, &headers, &header_size);
        if (got == 1 && r.pos - record_start != length) got = 0;
        PyObject *record = got == 1 ? record_type->tp_alloc(record_type, RECORD_FIELDS) : NULL;
        if (record == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(headers);
            if (got == 0) goto doubt;
            goto error;
        }
        PyObject *fields[RECORD_FIELDS] = {
            Py_NewRef(topic), Py_NewRef(partition), Py_NewRef(leader_epoch), PyLong_FromLongLong(offset),
            PyLong_FromLongLong(timestamp), Py_NewRef(type_object), key, value, headers, Py_NewRef(Py_None),
            PyLong_FromLongLong(key == Py_None ? -1 : key_size), PyLong_FromLongLong(value == Py_None ? -1 : value_size),
            PyLong_FromLongLong(header_size)};
        int complete = 1;
        for (int f = 0; f < RECORD_FIELDS; f++) {
            complete &= fields[f] != NULL;
            PyTuple_SET_ITEM(record, f, fields[f]);
        }
        if (untrack) PyObject_GC_UnTrack(record);
        if (!complete || PyList_Append(records, record) < 0) {
            Py_DECREF(record);
            goto error;
        }
        Py_DECREF(record);
        size += length;  /* checked against the bytes read above: no overflow */
    }
    if (r.pos != r.len) goto doubt;
    PyBuffer_Release(&view);
    Py_DECREF(type_object);
    PyObject *result = Py_BuildValue("(NL)", records, (long long)size);
    return result;
doubt:
    PyBuffer_Release(&view);
    Py_XDECREF(records);
    Py_XDECREF(type_object);
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    Py_XDECREF(records);
    Py_XDECREF(type_object);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "The records of a v2 batch as record_type tuples and the sum of their lengths; None at any doubt."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_batch_decoding", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native_batch_decoding(void) {
    no_headers = PyTuple_New(0);
    if (no_headers == NULL) return NULL;
    return PyModule_Create(&module);
}
