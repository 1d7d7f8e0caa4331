/* The inner loop of a key-value store's restoration in C (changelog_batch.py): each changelog
 * record becomes a put (or, with a null value, a delete) on a rocksdict WriteBatch.
 *
 * Why: in Python each record costs two attribute reads, three type checks and the call, about
 * 1 us on the benchmark machine; here the same work costs little more than rocksdict's own
 * put. The rules are the Python loop's, record for record: a null key is skipped, a key that
 * is not bytes or a value that is neither bytes nor None stops the loop and is reported by its
 * index (the caller names it and writes nothing), an error from put or delete propagates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *str_key, *str_value;

/* fill(records, put, delete, record_type, key_index, value_index) -> (applied, bad_index)
 *
 * records: a list or tuple. A record of exactly record_type (a named tuple type: the restore
 * consumer's ConsumerRecord) is read at key_index and value_index, any other by its key and
 * value attributes. bad_index is -1 when every record was applied or skipped. */
static PyObject *fill(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "fill() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *records = args[0], *put = args[1], *delete = args[2], *record_type = args[3];
    if (!PyList_CheckExact(records) && !PyTuple_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a list or a tuple");
        return NULL;
    }
    if (!PyType_Check(record_type) || !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple type");
        return NULL;
    }
    Py_ssize_t key_index = PyLong_AsSsize_t(args[4]);
    Py_ssize_t value_index = PyLong_AsSsize_t(args[5]);
    if ((key_index == -1 || value_index == -1) && PyErr_Occurred())
        return NULL;
    if (key_index < 0 || value_index < 0) {
        PyErr_SetString(PyExc_ValueError, "key_index and value_index must not be negative");
        return NULL;
    }
    Py_ssize_t applied = 0, bad = -1;
    /* the list may change size if put runs Python code: read its length every time */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(records); i++) {
        PyObject *record = PySequence_Fast_GET_ITEM(records, i), *key, *value;
        Py_INCREF(record);
        if (Py_TYPE(record) == (PyTypeObject *)record_type && PyTuple_GET_SIZE(record) > key_index
                && PyTuple_GET_SIZE(record) > value_index) {
            key = PyTuple_GET_ITEM(record, key_index);
            value = PyTuple_GET_ITEM(record, value_index);
            Py_INCREF(key);
            Py_INCREF(value);
        } else {
            key = PyObject_GetAttr(record, str_key);
            value = key == NULL ? NULL : PyObject_GetAttr(record, str_value);
            if (value == NULL) {
                Py_XDECREF(key);
                Py_DECREF(record);
                return NULL;
            }
        }
        Py_DECREF(record);
        PyObject *done = Py_None;
        if (key == Py_None) {
            Py_INCREF(done);
        } else if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value))) {
            bad = i;
            done = NULL;
        } else if (value == Py_None) {
            PyObject *call[1] = {key};
            done = PyObject_Vectorcall(delete, call, 1, NULL);
        } else {
            PyObject *call[2] = {key, value};
            done = PyObject_Vectorcall(put, call, 2, NULL);
        }
        int skipped = key == Py_None;
        Py_DECREF(key);
        Py_DECREF(value);
        if (bad >= 0)
            break;
        if (done == NULL)
            return NULL;
        Py_DECREF(done);
        if (!skipped)
            applied++;
    }
    return Py_BuildValue("(nn)", applied, bad);
}

static PyMethodDef methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "fill(records, put, delete, record_type, key_index, value_index) -> (applied, bad_index)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_changelog_batch",
    "The inner loop of a key-value store's restoration (changelog_batch.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_changelog_batch(void) {
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    if (str_key == NULL || str_value == NULL)
        return NULL;
    return PyModule_Create(&module);
}
