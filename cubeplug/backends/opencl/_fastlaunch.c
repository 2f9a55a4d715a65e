/* The OpenCL client's launch in C: what `client.launch` does in its common case, one C call.
 *
 * A `Launcher` stands in for one client's `launch` (or `launch_unchecked`): the server's
 * `launch_path` makes it and the client installs it over its method. It does, without a Python
 * frame, what the Python path does for a plain launch once the kernel has been launched before:
 *
 *   ComputeClient.launch      the thread's stream; the client's lock around the rest
 *   core/plans.py (make_plan) the argument checks, the streams' common case of MultiStream.enter
 *   OpenCLServer.queue_code   bind the buffers and set the scalars that changed; enqueue
 *
 * Keep it in step with those three. Anything else (a first launch, keyword arguments, a dynamic or
 * empty count, anything but live Handles of this server, a value the checked plan would not take
 * inline, a buffer another stream slot used last, a closed launcher) goes to the Python method,
 * which gives the same result or the precise error; so does a driver error, through the entry's
 * `on_error` (it enqueues again through PyOpenCL, which raises the error that is reported).
 *
 * The slots of cubeplug's own classes (Handle, SliceToken, StorageHandle, StreamState, CubeCount)
 * are read at the offsets of their member descriptors, found once by `init`, on objects whose type
 * is exactly that class. The OpenCL entry points come as addresses from the ICD loader PyOpenCL
 * uses (see launch_path.py). No OpenCL header is needed: the two prototypes are below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef cl_int (*EnqueueNDRange)(void *queue, void *kernel, cl_uint dims, const size_t *offset,
                                 const size_t *global, const size_t *local, cl_uint nwait,
                                 const void *wait, void *event);
typedef cl_int (*SetKernelArg)(void *kernel, cl_uint index, size_t size, const void *value);

#define MAX_ARGS 32
#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* ------------------------------------------------------------------ module state (set by init) */
static EnqueueNDRange enqueue_nd_range;
static SetKernelArg set_kernel_arg;
static PyTypeObject *Handle_T, *Token_T, *Region_T, *State_T, *Count_T;
static Py_ssize_t h_memory, h_owner, h_start, h_nbytes, h_end, h_stream;
static Py_ssize_t t_storage, t_stream;
static Py_ssize_t r_id, r_offset;
static Py_ssize_t s_stream, s_cursor;
static Py_ssize_t c_handle, c_x, c_y, c_z;
static PyObject *str_stack, *str_int_ptr, *zero, *one;
static int ready;

/* Scalar kinds: a code, its size, and whether it is a float. */
enum { K_I8, K_I16, K_I32, K_I64, K_U8, K_U16, K_U32, K_U64, K_F32, K_F64, K_COUNT };
static const char *kind_names[K_COUNT] = {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64"};
static const size_t kind_sizes[K_COUNT] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
static const long long int_lo[K_COUNT] = {INT8_MIN, INT16_MIN, INT32_MIN, INT64_MIN, 0, 0, 0, 0, 0, 0};
static const long long int_hi[K_COUNT] = {INT8_MAX, INT16_MAX, INT32_MAX, INT64_MAX, UINT8_MAX,
                                          UINT16_MAX, UINT32_MAX, 0, 0, 0};

typedef union {
    int8_t i8; int16_t i16; int32_t i32; int64_t i64;
    uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
    float f32; double f64;
} Value;

static int member_offset(PyTypeObject *type, const char *name, Py_ssize_t *out) {
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL) return -1;
    int ok = PyObject_TypeCheck(d, &PyMemberDescr_Type);
    PyMemberDef *m = ok ? ((PyMemberDescrObject *)d)->d_member : NULL;
    Py_DECREF(d);  /* the class holds it */
    if (m == NULL || (m->type != T_OBJECT_EX && m->type != T_OBJECT)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
        return -1;
    }
    *out = m->offset;
    return 0;
}

/* A Python int as a C long long when it fits: 0 done, -1 not an exact int or out of range. */
static inline int small_int(PyObject *o, long long *out) {
    if (o == NULL || !PyLong_CheckExact(o)) return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------ Entry: one kernel's launch */
typedef struct {
    PyObject_HEAD
    PyObject *cl_kernel;     /* the pyopencl.Kernel (kept alive while its address is used) */
    void *kernel;
    size_t local[3];
    int nbuf, nscal;
    Py_ssize_t align;        /* checked: offset alignment, else 1 */
    int checked;
    cl_uint buf_slot[MAX_ARGS];
    Py_ssize_t itemsize[MAX_ARGS];
    cl_uint scal_slot[MAX_ARGS];
    int kind[MAX_ARGS];
    PyObject *last_buffers;  /* OpenCLProgram.last_buffers: shared with the Python paths */
    PyObject *last_scalars;  /* OpenCLProgram.last_scalars: likewise */
    PyObject *pages;         /* OpenCLStorage._pages */
    PyObject *bind;          /* OpenCLStorage.bind */
    PyObject *on_error;      /* on_error(queue, (gx, gy, gz)): enqueue through PyOpenCL, raise its error */
} Entry;

static int Entry_traverse(Entry *self, visitproc visit, void *arg) {
    Py_VISIT(self->cl_kernel); Py_VISIT(self->last_buffers); Py_VISIT(self->last_scalars);
    Py_VISIT(self->pages); Py_VISIT(self->bind); Py_VISIT(self->on_error);
    return 0;
}

static int Entry_clear(Entry *self) {
    Py_CLEAR(self->cl_kernel); Py_CLEAR(self->last_buffers); Py_CLEAR(self->last_scalars);
    Py_CLEAR(self->pages); Py_CLEAR(self->bind); Py_CLEAR(self->on_error);
    return 0;
}

static void Entry_dealloc(Entry *self) {
    PyObject_GC_UnTrack(self);
    Entry_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Entry_init(Entry *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"cl_kernel", "local", "buffer_slots", "itemsizes", "scalar_slots",
                             "scalar_dtypes", "alignment", "checked", "last_buffers",
                             "last_scalars", "pages", "bind", "on_error", NULL};
    PyObject *cl_kernel, *local, *bslots, *isizes, *sslots, *sdtypes, *lastb, *lasts, *pages, *bind,
        *on_error;
    Py_ssize_t align;
    int checked;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOnpO!O!O!OO", kwlist, &cl_kernel, &local,
                                     &bslots, &isizes, &sslots, &sdtypes, &align, &checked,
                                     &PyList_Type, &lastb, &PyList_Type, &lasts, &PyDict_Type, &pages,
                                     &bind, &on_error))
        return -1;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_fastlaunch.init was not called");
        return -1;
    }
    if (self->cl_kernel != NULL) {
        PyErr_SetString(PyExc_TypeError, "an Entry is initialised once");
        return -1;
    }
    PyObject *ptr = PyObject_GetAttr(cl_kernel, str_int_ptr);
    if (ptr == NULL) return -1;
    self->kernel = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    if (self->kernel == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the kernel has a null handle");
        return -1;
    }
    PyObject *seqs[5] = {local, bslots, isizes, sslots, sdtypes};
    Py_ssize_t n[5];
    for (int i = 0; i < 5; i++) {
        if (!PyTuple_Check(seqs[i])) {
            PyErr_SetString(PyExc_TypeError, "local, slots, itemsizes and dtypes are tuples");
            return -1;
        }
        n[i] = PyTuple_GET_SIZE(seqs[i]);
    }
    if (n[0] != 3 || n[1] != n[2] || n[3] != n[4] || n[1] > MAX_ARGS || n[3] > MAX_ARGS ||
        PyList_GET_SIZE(lastb) != n[1] || PyList_GET_SIZE(lasts) != n[3] || align < 1) {
        PyErr_SetString(PyExc_ValueError, "inconsistent kernel layout");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        self->local[i] = PyLong_AsSize_t(PyTuple_GET_ITEM(local, i));
        if (PyErr_Occurred()) return -1;
    }
    self->nbuf = (int)n[1];
    self->nscal = (int)n[3];
    for (int i = 0; i < self->nbuf; i++) {
        self->buf_slot[i] = (cl_uint)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(bslots, i));
        self->itemsize[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(isizes, i));
        if (PyErr_Occurred()) return -1;
        if (self->itemsize[i] < 1) {
            PyErr_SetString(PyExc_ValueError, "an itemsize is at least 1");
            return -1;
        }
    }
    for (int i = 0; i < self->nscal; i++) {
        self->scal_slot[i] = (cl_uint)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(sslots, i));
        if (PyErr_Occurred()) return -1;
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(sdtypes, i));
        if (name == NULL) return -1;
        int k = 0;
        while (k < K_COUNT && strcmp(kind_names[k], name) != 0) k++;
        if (k == K_COUNT) {
            PyErr_Format(PyExc_ValueError, "scalar dtype %s has no native setter", name);
            return -1;
        }
        self->kind[i] = k;
    }
    self->align = checked ? align : 1;
    self->checked = checked;
    Py_INCREF(cl_kernel); Py_XSETREF(self->cl_kernel, cl_kernel);
    Py_INCREF(lastb); Py_XSETREF(self->last_buffers, lastb);
    Py_INCREF(lasts); Py_XSETREF(self->last_scalars, lasts);
    Py_INCREF(pages); Py_XSETREF(self->pages, pages);
    Py_INCREF(bind); Py_XSETREF(self->bind, bind);
    Py_INCREF(on_error); Py_XSETREF(self->on_error, on_error);
    return 0;
}

static PyTypeObject Entry_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cubeplug.backends.opencl._fastlaunch.Entry",
    .tp_doc = "One kernel's launch: its cl_kernel, arg slots, checks and the arguments set last.",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Entry_init,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
    .tp_dealloc = (destructor)Entry_dealloc,
};

/* ------------------------------------------------------------------ Launcher: a client's launch */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *client_ref;   /* weakref to the client (the fallback's self; no reference cycle) */
    PyObject *fallback;     /* ComputeClient.launch or .launch_unchecked (the function) */
    PyObject *acquire, *release;
    PyObject *local;        /* cubeplug.core.stream._local; NULL for the "single" policy */
    PyObject *server;       /* what a Handle's owner must be */
    PyObject *slots;        /* the MultiStream's stream states by slot (a list) */
    Py_ssize_t max_streams;
    long long max_count[3]; /* the device's most cubes per dimension (more: Python says so) */
    PyObject *entries;      /* dict: Kernel -> Entry, or None for a kernel that always goes to Python */
    PyObject *on_miss;      /* on_miss(kernel): an Entry, False (never), None (not yet) */
    PyObject *queue;        /* the last queue enqueued on, and its cl_command_queue */
    void *queue_ptr;
    int closed;
    Py_ssize_t fast;        /* launches taken in C (for tests and benchmarks) */
} Launcher;

static int Launcher_traverse(Launcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->client_ref); Py_VISIT(self->fallback); Py_VISIT(self->acquire);
    Py_VISIT(self->release); Py_VISIT(self->local); Py_VISIT(self->server); Py_VISIT(self->slots);
    Py_VISIT(self->entries); Py_VISIT(self->on_miss); Py_VISIT(self->queue);
    return 0;
}

static int Launcher_clear(Launcher *self) {
    Py_CLEAR(self->client_ref); Py_CLEAR(self->fallback); Py_CLEAR(self->acquire);
    Py_CLEAR(self->release); Py_CLEAR(self->local); Py_CLEAR(self->server); Py_CLEAR(self->slots);
    Py_CLEAR(self->entries); Py_CLEAR(self->on_miss); Py_CLEAR(self->queue);
    return 0;
}

static void Launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    Launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int client_alive(Launcher *self);

/* The Python method with the same arguments. */
static PyObject *fall_back(Launcher *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *client = NULL;
    if (self->client_ref != NULL) {
#if PY_VERSION_HEX >= 0x030D0000
        if (PyWeakref_GetRef(self->client_ref, &client) < 0) return NULL;
#else
        client = PyWeakref_GetObject(self->client_ref);
        if (client == NULL) return NULL;
        client = client == Py_None ? NULL : Py_NewRef(client);
#endif
    }
    if (client == NULL) {
        if (!PyErr_Occurred()) client_alive(self);  /* says so */
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *small[8];
    PyObject **stack = small;
    if (nargs + nkw + 1 > 8) {
        stack = PyMem_Malloc((nargs + nkw + 1) * sizeof(PyObject *));
        if (stack == NULL) {
            Py_DECREF(client);
            return PyErr_NoMemory();
        }
    }
    stack[0] = client;
    memcpy(stack + 1, args, (nargs + nkw) * sizeof(PyObject *));
    PyObject *r = PyObject_Vectorcall(self->fallback, stack, nargs + 1, kwnames);
    Py_DECREF(client);
    if (stack != small) PyMem_Free(stack);
    return r;
}

/* After a fallback for a kernel with no entry: ask the server for one (it has a plan now). */
static void learn(Launcher *self, PyObject *kernel) {
    if (self->closed) return;
    PyObject *entry = PyObject_CallOneArg(self->on_miss, kernel);
    if (entry == NULL) {
        PyErr_WriteUnraisable(self->on_miss);
        return;
    }
    if (self->closed) {
        /* closed by another thread meanwhile: keep nothing of the server's */
    } else if (entry == Py_False) {
        if (PyDict_SetItem(self->entries, kernel, Py_None) < 0) PyErr_Clear();
    } else if (Py_TYPE(entry) == &Entry_Type) {
        if (PyDict_SetItem(self->entries, kernel, entry) < 0) PyErr_Clear();
    }
    Py_DECREF(entry);
}

static inline int call_lock(PyObject *fn) {
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* Python's ``a % m`` for m > 0. */
static inline long long pymod(long long a, long long m) {
    long long r = a % m;
    return r < 0 ? r + m : r;
}

/* A launch's count as three positive ints: a static CubeCount, an int, or a tuple of 1-3 ints
 * (what ComputeClient.launch turns into a CubeCount); 0 for anything else, or a zero. */
static int count_axes(PyObject *count, long long axes[3]) {
    PyObject *items[3];
    Py_ssize_t n = 3;
    if (Py_TYPE(count) == Count_T) {
        if (SLOT(count, c_handle) != Py_None) return 0;
        items[0] = SLOT(count, c_x); items[1] = SLOT(count, c_y); items[2] = SLOT(count, c_z);
    } else if (PyLong_CheckExact(count)) {
        n = 1;
        items[0] = count;
    } else if (PyTuple_CheckExact(count) && PyTuple_GET_SIZE(count) >= 1 && PyTuple_GET_SIZE(count) <= 3) {
        n = PyTuple_GET_SIZE(count);
        for (Py_ssize_t a = 0; a < n; a++) items[a] = PyTuple_GET_ITEM(count, a);
    } else {
        return 0;
    }
    for (Py_ssize_t a = 0; a < 3; a++) {
        long long v = 1;
        if (a < n && (items[a] == NULL || small_int(items[a], &v) < 0)) return 0;
        if (v <= 0 || v > 0xFFFFFFFFLL) return 0;  /* empty or out of range: Python */
        axes[a] = v;
    }
    return 1;
}

/* The items of a launch's buffers or scalars: a list or tuple of exactly ``want`` (none given: 0). */
static int items_of(PyObject *seq, int want, PyObject *const **out) {
    Py_ssize_t n;
    if (seq == NULL) {
        n = 0;
        *out = NULL;
    } else if (PyList_CheckExact(seq)) {
        n = PyList_GET_SIZE(seq);
        *out = ((PyListObject *)seq)->ob_item;
    } else if (PyTuple_CheckExact(seq)) {
        n = PyTuple_GET_SIZE(seq);
        *out = ((PyTupleObject *)seq)->ob_item;
    } else {
        return 0;
    }
    return n == want;
}

/* The checks and the streams' common case; 1: take the fast path, 0: fall back. Reads only:
 * nothing is changed before every test passed. Runs under the lock. */
static int check(Launcher *self, Entry *e, PyObject *count, PyObject *const *bufs,
                 PyObject *const *vals, long long sid, PyObject **state_out, size_t global[3],
                 Value *values) {
    long long axes[3];
    if (!count_axes(count, axes)) return 0;
    for (int a = 0; a < 3; a++) {
        if (axes[a] > self->max_count[a]) return 0;  /* beyond the device's limit: Python says so */
        global[a] = (size_t)axes[a] * e->local[a];
    }
    long long m = self->max_streams;
    long long index = pymod(sid, m);
    if (index >= PyList_GET_SIZE(self->slots)) return 0;
    PyObject *state = PyList_GET_ITEM(self->slots, index);
    if (Py_TYPE(state) != State_T || SLOT(state, s_stream) == NULL ||
        SLOT(state, s_cursor) == NULL || !PyLong_CheckExact(SLOT(state, s_cursor)))
        return 0;  /* None: the slot's stream is not made yet */
    for (int i = 0; i < e->nbuf; i++) {
        PyObject *b = bufs[i];
        if (Py_TYPE(b) != Handle_T || SLOT(b, h_owner) != self->server) return 0;
        PyObject *t = SLOT(b, h_memory);
        if (t == NULL || Py_TYPE(t) != Token_T) return 0;
        long long start, nbytes, end, bs, ls;
        if (small_int(SLOT(b, h_start), &start) < 0 || small_int(SLOT(b, h_nbytes), &nbytes) < 0 ||
            small_int(SLOT(b, h_end), &end) < 0 || small_int(SLOT(b, h_stream), &bs) < 0 ||
            small_int(SLOT(t, t_stream), &ls) < 0)
            return 0;
        if (e->checked && ((e->align > 1 && start % e->align) || (nbytes - start - end) % e->itemsize[i]))
            return 0;
        if (!(bs == sid || pymod(bs, m) == index)) return 0;
        if (!(ls == sid || ls < 0 || pymod(ls, m) == index)) return 0;
        PyObject *r = SLOT(t, t_storage);
        long long offset;
        if (r == NULL || Py_TYPE(r) != Region_T || SLOT(r, r_id) == NULL ||
            !PyLong_CheckExact(SLOT(r, r_id)) || small_int(SLOT(r, r_offset), &offset) < 0)
            return 0;
    }
    for (int j = 0; j < e->nscal; j++) {
        PyObject *v = vals[j];
        int k = e->kind[j];
        Value *out = &values[j];
        if (k == K_F32 || k == K_F64) {
            if (!PyFloat_CheckExact(v)) return 0;
            double d = PyFloat_AS_DOUBLE(v);
            double hi = k == K_F32 ? (double)FLT_MAX : DBL_MAX;
            if (!(-hi <= d && d <= hi)) return 0;  /* NaN and infinities too: Python says what to do */
            if (k == K_F32) out->f32 = (float)d; else out->f64 = d;
        } else if (k == K_U64) {
            if (!PyLong_CheckExact(v)) return 0;
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            out->u64 = u;
        } else {
            long long x;
            if (small_int(v, &x) < 0 || x < int_lo[k] || x > int_hi[k]) return 0;
            switch (k) {
                case K_I8: out->i8 = (int8_t)x; break;
                case K_I16: out->i16 = (int16_t)x; break;
                case K_I32: out->i32 = (int32_t)x; break;
                case K_I64: out->i64 = (int64_t)x; break;
                case K_U8: out->u8 = (uint8_t)x; break;
                case K_U16: out->u16 = (uint16_t)x; break;
                default: out->u32 = (uint32_t)x; break;
            }
        }
    }
    *state_out = state;
    return 1;
}

/* Bind, set, enqueue: the checks passed; the lock is held. ``bufs`` and ``vals`` are the caller's
 * own references. */
static int queue(Launcher *self, Entry *e, PyObject *const *bufs, PyObject *const *vals,
                 PyObject *sid_obj, PyObject *state, const size_t global[3], const Value *values) {
    /* What binding needs, read before any Python code runs (bind is Python: another thread may
     * then drop a handle): page id, offset in the page, size. */
    PyObject *ids[MAX_ARGS];
    long long offsets[MAX_ARGS], sizes[MAX_ARGS];
    for (int i = 0; i < e->nbuf; i++) {
        PyObject *b = bufs[i], *t = SLOT(b, h_memory), *r = SLOT(t, t_storage);
        long long start = PyLong_AsLongLong(SLOT(b, h_start));
        sizes[i] = PyLong_AsLongLong(SLOT(b, h_nbytes)) - start - PyLong_AsLongLong(SLOT(b, h_end));
        offsets[i] = PyLong_AsLongLong(SLOT(r, r_offset)) + start;
        ids[i] = SLOT(r, r_id);
        Py_INCREF(ids[i]);
        /* The streams: the slice is now last used by this stream. */
        Py_INCREF(sid_obj);
        Py_XSETREF(SLOT(t, t_stream), sid_obj);
    }
    int rc = -1, nids = e->nbuf;
    PyObject *stream = SLOT(state, s_stream);
    Py_INCREF(stream);
    PyObject *cursor = PyNumber_Add(SLOT(state, s_cursor), one);  /* the stream's cursor advances */
    if (cursor == NULL) goto done;
    Py_XSETREF(SLOT(state, s_cursor), cursor);
    for (int i = 0; i < e->nbuf; i++) {
        PyObject *mem;
        if (offsets[i] == 0 && (mem = PyDict_GetItemWithError(e->pages, ids[i])) != NULL) {
            Py_INCREF(mem);
        } else {  /* a sub-buffer (or a page this storage no longer has: bind says so) */
            if (PyErr_Occurred()) goto done;
            PyObject *off = PyLong_FromLongLong(offsets[i]), *sz = PyLong_FromLongLong(sizes[i]);
            mem = off && sz ? PyObject_CallFunctionObjArgs(e->bind, ids[i], off, sz, NULL) : NULL;
            Py_XDECREF(off);
            Py_XDECREF(sz);
            if (mem == NULL) goto done;
        }
        if (mem != PyList_GET_ITEM(e->last_buffers, i)) {
            PyObject *ptr = PyObject_GetAttr(mem, str_int_ptr);
            void *p = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
            Py_XDECREF(ptr);
            if (PyErr_Occurred()) {
                Py_DECREF(mem);
                goto done;
            }
            cl_int err = set_kernel_arg(e->kernel, e->buf_slot[i], sizeof(void *), &p);
            if (err != 0) {
                Py_DECREF(mem);
                PyErr_Format(PyExc_RuntimeError, "clSetKernelArg(buffer %d) failed with %d", i, err);
                goto done;
            }
            PyList_SetItem(e->last_buffers, i, mem);  /* steals mem */
        } else {
            Py_DECREF(mem);
        }
    }
    if (e->nscal) {
        /* As in OpenCLServer.execute: values equal to those set last are not set again, unless a
         * float is zero (0.0 == -0.0, but their bits differ). */
        int changed = 0;
        for (int j = 0; j < e->nscal && !changed; j++) {
            int k = e->kind[j];
            if ((k == K_F32 || k == K_F64) && PyFloat_AS_DOUBLE(vals[j]) == 0.0) {
                changed = 1;
                break;
            }
            PyObject *held = PyList_GET_ITEM(e->last_scalars, j);
            if (held == vals[j]) continue;
            if (!PyLong_CheckExact(held) && !PyFloat_CheckExact(held)) {
                /* unset, or a value another path set (a numpy scalar): set again rather than
                 * compare, which could run Python code or raise */
                changed = 1;
                break;
            }
            int ne = PyObject_RichCompareBool(vals[j], held, Py_NE);  /* ints and floats: C only */
            if (ne < 0) goto done;
            changed = ne;
        }
        if (changed) {
            for (int j = 0; j < e->nscal; j++) {
                cl_int err = set_kernel_arg(e->kernel, e->scal_slot[j], kind_sizes[e->kind[j]], &values[j]);
                if (err != 0) {
                    /* the arguments set now are unknown: set them all again next time (None is
                     * unequal to every value the launch paths take) */
                    for (int q = 0; q < e->nscal; q++) {
                        Py_INCREF(Py_None);
                        PyList_SetItem(e->last_scalars, q, Py_None);
                    }
                    PyErr_Format(PyExc_RuntimeError, "clSetKernelArg(scalar %d) failed with %d", j, err);
                    goto done;
                }
            }
            for (int j = 0; j < e->nscal; j++) {
                Py_INCREF(vals[j]);
                PyList_SetItem(e->last_scalars, j, vals[j]);
            }
        }
    }
    if (stream != self->queue) {
        PyObject *ptr = PyObject_GetAttr(stream, str_int_ptr);
        void *p = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
        Py_XDECREF(ptr);
        if (PyErr_Occurred()) goto done;
        Py_INCREF(stream);
        Py_XSETREF(self->queue, stream);
        self->queue_ptr = p;
    }
    cl_int err = enqueue_nd_range(self->queue_ptr, e->kernel, 3, NULL, global, e->local, 0, NULL, NULL);
    if (err != 0) {
        PyObject *r = PyObject_CallFunction(e->on_error, "O(nnn)", stream, (Py_ssize_t)global[0],
                                            (Py_ssize_t)global[1], (Py_ssize_t)global[2]);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    self->fast++;
    rc = 0;
done:
    for (int i = 0; i < nids; i++) Py_DECREF(ids[i]);
    Py_DECREF(stream);
    return rc;
}

/* 1 when the client is alive, 0 (ReferenceError set) when it is gone, -1 on error. */
static int client_alive(Launcher *self) {
    if (self->client_ref == NULL) {
        PyErr_SetString(PyExc_TypeError, "this Launcher was not initialised");
        return -1;
    }
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *client;
    if (PyWeakref_GetRef(self->client_ref, &client) < 0) return -1;
    Py_XDECREF(client);
    int alive = client != NULL;
#else
    PyObject *client = PyWeakref_GetObject(self->client_ref);
    if (client == NULL) return -1;
    int alive = client != Py_None;
#endif
    if (!alive)
        PyErr_SetString(PyExc_ReferenceError,
                        "this launch belongs to a client that no longer exists; keep a reference to the "
                        "client (cubeplug.client(...) keeps one) and launch through it");
    return alive;
}

static PyObject *Launcher_vectorcall(Launcher *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    /* A launcher holds its client weakly (no reference cycle): without the client, every call
     * raises, the common case too, rather than some calls working. */
    if (client_alive(self) <= 0) return NULL;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->closed || (kwnames && PyTuple_GET_SIZE(kwnames)) || nargs < 2 || nargs > 4)
        return fall_back(self, args, nargsf, kwnames);
    PyObject *kernel = args[0];
    PyObject *entry = PyDict_GetItemWithError(self->entries, kernel);
    if (entry == NULL) {
        if (PyErr_Occurred()) {  /* not hashable, so not a Kernel: Python says so */
            PyErr_Clear();
            return fall_back(self, args, nargsf, kwnames);
        }
        PyObject *r = fall_back(self, args, nargsf, kwnames);
        if (r != NULL) learn(self, kernel);
        return r;
    }
    if (entry == Py_None) return fall_back(self, args, nargsf, kwnames);
    Entry *e = (Entry *)Py_NewRef(entry);  /* ours: the dict may change when Python code runs */
    /* The thread's stream: 0 under the "single" policy, else the top of its stream stack. */
    PyObject *sid_obj = NULL;
    long long sid;
    if (self->local == NULL) {
        sid_obj = Py_NewRef(zero);
    } else {
        PyObject *stack = PyObject_GetAttr(self->local, str_stack);
        if (stack == NULL) {
            PyErr_Clear();  /* a thread with no stream yet: Python makes it */
        } else {
            if (PyList_CheckExact(stack) && PyList_GET_SIZE(stack) > 0)
                sid_obj = Py_NewRef(PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1));
            Py_DECREF(stack);
        }
    }
    if (sid_obj == NULL || small_int(sid_obj, &sid) < 0) {
        Py_XDECREF(sid_obj);
        Py_DECREF(e);
        return fall_back(self, args, nargsf, kwnames);
    }
    PyObject *result = NULL;
    if (call_lock(self->acquire) < 0) goto out;
    /* Everything below reads the arguments afresh: other threads ran while the lock was awaited. */
    PyObject *const *bufs, *const *vals;
    PyObject *state = NULL;
    size_t global[3];
    Value values[MAX_ARGS];
    int ok = !self->closed && items_of(nargs > 2 ? args[2] : NULL, e->nbuf, &bufs) &&
             items_of(nargs > 3 ? args[3] : NULL, e->nscal, &vals) &&
             check(self, e, args[1], bufs, vals, sid, &state, global, values);
    int rc = 0;
    if (ok) {  /* our own references: the caller's lists may change while Python code runs */
        PyObject *held[2 * MAX_ARGS];
        int n = 0;
        for (int i = 0; i < e->nbuf; i++) held[n++] = Py_NewRef(bufs[i]);
        for (int j = 0; j < e->nscal; j++) held[n++] = Py_NewRef(vals[j]);
        rc = queue(self, e, held, held + e->nbuf, sid_obj, state, global, values);
        for (int i = 0; i < n; i++) Py_DECREF(held[i]);
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int released = call_lock(self->release);
    if (et != NULL) {
        if (released < 0) PyErr_WriteUnraisable(self->release);
        PyErr_Restore(et, ev, tb);
    }
    if (rc < 0 || released < 0) goto out;
    if (!ok) {
        result = fall_back(self, args, nargsf, kwnames);
        goto out;
    }
    result = Py_None;
    Py_INCREF(result);
out:
    Py_DECREF(e);
    Py_DECREF(sid_obj);
    return result;
}

static int Launcher_init(Launcher *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"client_ref", "fallback", "lock", "local", "server", "slots",
                             "max_streams", "entries", "on_miss", "max_count", NULL};
    PyObject *client_ref, *fallback, *lock, *local, *server, *slots, *entries, *on_miss;
    Py_ssize_t max_streams;
    long long max_count[3] = {0xFFFFFFFFLL, 0xFFFFFFFFLL, 0xFFFFFFFFLL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOO!nO!O|(LLL)", kwlist, &client_ref, &fallback,
                                     &lock, &local, &server, &PyList_Type, &slots, &max_streams,
                                     &PyDict_Type, &entries, &on_miss, &max_count[0], &max_count[1],
                                     &max_count[2]))
        return -1;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_fastlaunch.init was not called");
        return -1;
    }
    if (self->vectorcall != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Launcher is initialised once");
        return -1;
    }
    if (!PyWeakref_CheckRef(client_ref) || max_streams < 1) {
        PyErr_SetString(PyExc_TypeError, "client_ref is a weakref.ref; max_streams is at least 1");
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (release == NULL) {
        Py_XDECREF(acquire);
        return -1;
    }
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release);
    Py_INCREF(client_ref); Py_XSETREF(self->client_ref, client_ref);
    Py_INCREF(fallback); Py_XSETREF(self->fallback, fallback);
    if (local == Py_None) {
        Py_CLEAR(self->local);
    } else {
        Py_INCREF(local);
        Py_XSETREF(self->local, local);
    }
    Py_INCREF(server); Py_XSETREF(self->server, server);
    Py_INCREF(slots); Py_XSETREF(self->slots, slots);
    Py_INCREF(entries); Py_XSETREF(self->entries, entries);
    Py_INCREF(on_miss); Py_XSETREF(self->on_miss, on_miss);
    self->max_streams = max_streams;
    for (int a = 0; a < 3; a++) self->max_count[a] = max_count[a];
    self->vectorcall = (vectorcallfunc)Launcher_vectorcall;
    return 0;
}

static PyObject *Launcher_close(Launcher *self, PyObject *Py_UNUSED(ignored)) {
    self->closed = 1;
    if (self->entries != NULL) PyDict_Clear(self->entries);
    Py_CLEAR(self->slots);  /* the streams' states and queues are the server's to release */
    Py_CLEAR(self->queue);
    self->queue_ptr = NULL;
    Py_RETURN_NONE;
}

static PyObject *Launcher_get_fast(Launcher *self, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(self->fast);
}

static PyObject *Launcher_get_closed(Launcher *self, void *Py_UNUSED(c)) {
    return PyBool_FromLong(self->closed);
}

static PyMethodDef Launcher_methods[] = {
    {"close", (PyCFunction)Launcher_close, METH_NOARGS,
     "Send every later call to the Python method and let go of the kernels."},
    {NULL},
};

static PyGetSetDef Launcher_getset[] = {
    {"fast_launches", (getter)Launcher_get_fast, NULL, "How many launches took the C path.", NULL},
    {"closed", (getter)Launcher_get_closed, NULL, "True once close() was called.", NULL},
    {NULL},
};

static PyTypeObject Launcher_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cubeplug.backends.opencl._fastlaunch.Launcher",
    .tp_doc = "A client's launch (or launch_unchecked) whose common case runs in C.",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launcher_init,
    .tp_traverse = (traverseproc)Launcher_traverse,
    .tp_clear = (inquiry)Launcher_clear,
    .tp_dealloc = (destructor)Launcher_dealloc,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = Launcher_methods,
    .tp_getset = Launcher_getset,
};

/* ------------------------------------------------------------------ Batch: a graph's pre-bound replay */
/* A captured graph's steps, each launch on a kernel object of its own whose arguments were all set
 * when the graph was sealed (replay.py): a replay only enqueues, in order, `times` over. A launch is
 * one clEnqueueNDRangeKernel; any other step (a copy, a fill) is a Python callable taking the queue.
 * The Python loop of the same replay (replay.PythonBatch) costs about 1 us more per launch on PoCL,
 * as much as the enqueue itself (bench/bench_graphs.py). */
typedef struct {
    void *kernel;            /* NULL: a Python step (items[i] is the callable) */
    size_t global[3], local[3];
} BatchItem;

typedef struct {
    PyObject_HEAD
    PyObject *items;         /* the tuple of steps: keeps the kernels and the callables alive */
    BatchItem *c;
    Py_ssize_t n;
} Batch;

static int Batch_traverse(Batch *self, visitproc visit, void *arg) {
    Py_VISIT(self->items);
    return 0;
}

static int Batch_clear(Batch *self) {
    Py_CLEAR(self->items);
    return 0;
}

static void Batch_dealloc(Batch *self) {
    PyObject_GC_UnTrack(self);
    Batch_clear(self);
    PyMem_Free(self->c);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int size3(PyObject *seq, size_t out[3], const char *what) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != 3) {
        PyErr_Format(PyExc_TypeError, "a Batch launch's %s is a tuple of 3 ints", what);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = PyLong_AsSize_t(PyTuple_GET_ITEM(seq, i));
        if (PyErr_Occurred()) return -1;
    }
    return 0;
}

static int Batch_init(Batch *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"steps", NULL};
    PyObject *steps;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_fastlaunch.init was not called");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &steps)) return -1;
    PyObject *items = PySequence_Tuple(steps);
    if (items == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    BatchItem *c = PyMem_Calloc(n ? n : 1, sizeof(BatchItem));
    if (c == NULL) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (PyCallable_Check(item)) continue;
        /* (cl_kernel, (gx, gy, gz), (lx, ly, lz)) */
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_Format(PyExc_TypeError, "Batch step %zd is neither a callable nor "
                         "(cl_kernel, global, local)", i);
            goto fail;
        }
        PyObject *ptr = PyObject_GetAttr(PyTuple_GET_ITEM(item, 0), str_int_ptr);
        c[i].kernel = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
        Py_XDECREF(ptr);
        if (PyErr_Occurred()) goto fail;
        if (c[i].kernel == NULL) {
            PyErr_Format(PyExc_ValueError, "Batch step %zd has a null kernel", i);
            goto fail;
        }
        if (size3(PyTuple_GET_ITEM(item, 1), c[i].global, "global size") < 0 ||
            size3(PyTuple_GET_ITEM(item, 2), c[i].local, "local size") < 0)
            goto fail;
    }
    Py_XSETREF(self->items, items);
    PyMem_Free(self->c);
    self->c = c;
    self->n = n;
    return 0;
fail:
    Py_DECREF(items);
    PyMem_Free(c);
    return -1;
}

/* run(queue, times): enqueue the steps `times` times on the pyopencl queue. A driver error raises
 * RuntimeError("clEnqueueNDRangeKernel", step index, error code); a Python step's error propagates. */
static PyObject *Batch_run(Batch *self, PyObject *args) {
    PyObject *queue;
    Py_ssize_t times;
    if (!PyArg_ParseTuple(args, "On", &queue, &times)) return NULL;
    if (self->items == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Batch was not initialised");
        return NULL;
    }
    PyObject *ptr = PyObject_GetAttr(queue, str_int_ptr);
    void *q = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    if (PyErr_Occurred()) return NULL;
    PyObject *items = self->items;
    Py_INCREF(items);  /* a Python step could reinitialise the Batch: keep what is being read */
    BatchItem *c = self->c;
    Py_ssize_t n = self->n;
    for (Py_ssize_t t = 0; t < times; t++) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (c[i].kernel != NULL) {
                cl_int err = enqueue_nd_range(q, c[i].kernel, 3, NULL, c[i].global, c[i].local, 0, NULL, NULL);
                if (err != 0) {
                    PyObject *e = Py_BuildValue("(sni)", "clEnqueueNDRangeKernel", i, (int)err);
                    if (e != NULL) {
                        PyErr_SetObject(PyExc_RuntimeError, e);
                        Py_DECREF(e);
                    }
                    Py_DECREF(items);
                    return NULL;
                }
            } else {
                PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(items, i), queue);
                if (r == NULL) {
                    Py_DECREF(items);
                    return NULL;
                }
                Py_DECREF(r);
                if (self->c != c) {  /* reinitialised meanwhile: stop rather than read freed items */
                    Py_DECREF(items);
                    PyErr_SetString(PyExc_RuntimeError, "Batch was reinitialised during run");
                    return NULL;
                }
            }
        }
    }
    Py_DECREF(items);
    Py_RETURN_NONE;
}

static PyMethodDef Batch_methods[] = {
    {"run", (PyCFunction)Batch_run, METH_VARARGS,
     "run(queue, times): enqueue the steps `times` times on the queue (a pyopencl.CommandQueue)."},
    {NULL},
};

static PyTypeObject Batch_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cubeplug.backends.opencl._fastlaunch.Batch",
    .tp_doc = "A graph's pre-bound steps: Batch(steps), run(queue, times) enqueues them in C.",
    .tp_basicsize = sizeof(Batch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Batch_init,
    .tp_traverse = (traverseproc)Batch_traverse,
    .tp_clear = (inquiry)Batch_clear,
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_methods = Batch_methods,
};

/* ------------------------------------------------------------------ module */
static PyObject *init(PyObject *mod, PyObject *args) {
    PyObject *handle, *token, *region, *state, *count;
    PyObject *enq, *setarg;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OO", &PyType_Type, &handle, &PyType_Type, &token,
                          &PyType_Type, &region, &PyType_Type, &state, &PyType_Type, &count, &enq,
                          &setarg))
        return NULL;
    struct { PyObject *type; const char *name; Py_ssize_t *out; } fields[] = {
        {handle, "token", &h_memory}, {handle, "owner", &h_owner}, {handle, "start", &h_start},
        {handle, "nbytes", &h_nbytes}, {handle, "end", &h_end}, {handle, "stream", &h_stream},
        {token, "storage", &t_storage}, {token, "stream", &t_stream},
        {region, "id", &r_id}, {region, "offset", &r_offset},
        {state, "stream", &s_stream}, {state, "cursor", &s_cursor},
        {count, "handle", &c_handle}, {count, "x", &c_x}, {count, "y", &c_y}, {count, "z", &c_z},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (member_offset((PyTypeObject *)fields[i].type, fields[i].name, fields[i].out) < 0) return NULL;
    void *e = PyLong_AsVoidPtr(enq), *s = PyLong_AsVoidPtr(setarg);
    if (PyErr_Occurred()) return NULL;
    if (e == NULL || s == NULL) {
        PyErr_SetString(PyExc_ValueError, "null OpenCL entry point");
        return NULL;
    }
    enqueue_nd_range = (EnqueueNDRange)e;
    set_kernel_arg = (SetKernelArg)s;
    PyTypeObject **types[] = {&Handle_T, &Token_T, &Region_T, &State_T, &Count_T};
    PyObject *given[] = {handle, token, region, state, count};
    for (int i = 0; i < 5; i++) {
        Py_INCREF(given[i]);
        Py_XSETREF(*types[i], (PyTypeObject *)given[i]);
    }
    ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"init", init, METH_VARARGS,
     "init(Handle, SliceToken, StorageHandle, StreamState, CubeCount, clEnqueueNDRangeKernel, "
     "clSetKernelArg): the slot layout of cubeplug's classes and the OpenCL entry points (addresses)."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cubeplug.backends.opencl._fastlaunch",
    "The OpenCL client's launch in C (see launch_path.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) {
    if (PyType_Ready(&Entry_Type) < 0 || PyType_Ready(&Launcher_Type) < 0 || PyType_Ready(&Batch_Type) < 0)
        return NULL;
    str_stack = PyUnicode_InternFromString("stack");
    str_int_ptr = PyUnicode_InternFromString("int_ptr");
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    if (str_stack == NULL || str_int_ptr == NULL || zero == NULL || one == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* What an Entry takes, for launch_path.py to tell which kernels the launcher can take. */
    PyObject *kinds = PyFrozenSet_New(NULL);
    for (int k = 0; kinds != NULL && k < K_COUNT; k++) {
        PyObject *name = PyUnicode_FromString(kind_names[k]);
        if (name == NULL || PySet_Add(kinds, name) < 0) Py_CLEAR(kinds);
        Py_XDECREF(name);
    }
    if (kinds == NULL || PyModule_AddObjectRef(m, "SCALAR_DTYPES", kinds) < 0 ||
        PyModule_AddIntConstant(m, "MAX_ARGS", MAX_ARGS) < 0 ||
        PyModule_AddObjectRef(m, "Entry", (PyObject *)&Entry_Type) < 0 ||
        PyModule_AddObjectRef(m, "Launcher", (PyObject *)&Launcher_Type) < 0 ||
        PyModule_AddObjectRef(m, "Batch", (PyObject *)&Batch_Type) < 0) {
        Py_XDECREF(kinds);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(kinds);
    return m;
}
