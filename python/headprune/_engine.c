/*
 * _engine.c -- headprune's engine in a Python process (the module
 * headprune._engine; headprune/__init__.py is the API people use).
 *
 * A thin layer, as the command line is one: it turns Python arguments into
 * the engine's options, calls the engine with the GIL released, and hands
 * back what the engine's own JSON writers make (results_json.c), so that a
 * result read here has the fields and the digits `headprune ... --json`
 * prints. An engine error becomes headprune.Error (a ValueError) carrying
 * the engine's one line and its status name.
 *
 * Computations run one at a time (a process-wide lock): the engine's thread
 * count and kernel choice are process-wide state (hp_runtime_init).
 * Must not: print, exit, or compute anything the engine computes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "headprune.h"
#include "query.h" /* hp_query_kinds: each kind's name, options and help */

static PyObject *Error; /* headprune.Error */

/* One engine computation at a time; taken with the GIL released. in_engine: this thread is inside one, so
 * a progress callable that calls the engine again is an error, not a deadlock. */
static pthread_mutex_t engine_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local bool in_engine;

/* Whether this thread may start an engine computation (false with RuntimeError set). */
static bool engine_may_enter(void)
{
    if (in_engine)
        PyErr_SetString(PyExc_RuntimeError, "headprune: the engine is already computing in this thread (a "
                                            "progress callable cannot call it)");
    return !in_engine;
}

/* Without the GIL: take the engine, and give it back. */
static void engine_enter(void)
{
    pthread_mutex_lock(&engine_lock);
    in_engine = true;
}

static void engine_leave(void)
{
    in_engine = false;
    pthread_mutex_unlock(&engine_lock);
}

/* Raise headprune.Error(msg) with .status set to st's name; NULL, to return. */
static PyObject *raise_engine(enum hp_status st, const struct hp_error *err)
{
    const char *msg = err && err->msg[0] ? err->msg : hp_status_name(st);
    PyObject *e = PyObject_CallFunction(Error, "s", msg);
    if (!e)
        return NULL;
    PyObject *name = PyUnicode_FromString(hp_status_name(st));
    if (name && PyObject_SetAttrString(e, "status", name) == 0)
        PyErr_SetObject(Error, e);
    Py_XDECREF(name);
    Py_DECREF(e);
    return NULL;
}

/* Text the engine wrote (malloc'd) as a str, freed; NULL with MemoryError when there was none. */
static PyObject *take_text(char *s)
{
    if (!s)
        return PyErr_NoMemory();
    PyObject *o = PyUnicode_FromString(s);
    free(s);
    return o;
}

static void runtime_once(void)
{
    static bool done;
    if (!done) {
        hp_runtime_init(0);
        done = true;
    }
}

// --- progress callbacks -----------------------------------------------------------------

/*
 * A Python callable the engine calls as it goes, from the computing thread, with the GIL taken back for
 * the call. An exception it raises (a KeyboardInterrupt that arrived, a bar that failed) stops the work
 * where the engine can stop it and is raised when the call returns.
 */
struct py_progress {
    PyObject *fn;      /* NULL or a callable */
    PyObject *exc;     /* the first exception it raised (a reference), else NULL */
    volatile int stop; /* set when it raised: a sweep stops after its batch */
};

/* fn(args) with the GIL; an exception is kept, and stops the work. */
static void progress_call(struct py_progress *p, PyObject *(*make)(void *), void *what)
{
    PyGILState_STATE g = PyGILState_Ensure();
    if (!p->exc) {
        /* a tuple is the arguments ((done, total)), anything else the one argument (a dict) */
        PyObject *args = make(what);
        PyObject *r = !args ? NULL : PyTuple_Check(args) ? PyObject_CallObject(p->fn, args) : PyObject_CallOneArg(p->fn, args);
        Py_XDECREF(args);
        Py_XDECREF(r);
        /* a Ctrl-C Python's handler has seen arrives here, as the work goes on */
        if (r && PyErr_CheckSignals() == 0) {
            PyGILState_Release(g);
            return;
        }
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value)
            PyException_SetTraceback(value, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        p->exc = value ? value : Py_NewRef(PyExc_RuntimeError);
        p->stop = 1;
    }
    PyGILState_Release(g);
}

/* The kept exception raised (NULL returned); or NULL without one (nothing raised: the caller goes on). */
static bool progress_raise(struct py_progress *p)
{
    if (!p->exc)
        return false;
    PyErr_SetObject((PyObject *)Py_TYPE(p->exc), p->exc);
    Py_CLEAR(p->exc);
    return true;
}

// --- Model --------------------------------------------------------------------------------

typedef struct {
    PyObject_HEAD
    struct hp_model *m;
    struct hp_tokenizer *tok; /* opened on first use */
    char *dir;
    int busy; /* computations using m or tok with the GIL released: close() waits for none (it refuses) */
} ModelObject;

static void Model_dealloc(ModelObject *self)
{
    hp_tokenizer_free(self->tok);
    hp_model_close(self->m);
    free(self->dir);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Model_init(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", NULL};
    PyObject *path;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&:Model", names, PyUnicode_FSConverter, &path))
        return -1;
    if (self->m) {
        PyErr_SetString(PyExc_RuntimeError, "Model: already open");
        Py_DECREF(path);
        return -1;
    }
    const char *dir = PyBytes_AS_STRING(path);
    struct hp_error err = {0};
    enum hp_status st;
    runtime_once();
    Py_BEGIN_ALLOW_THREADS
    st = hp_model_open(dir, &self->m, &err);
    Py_END_ALLOW_THREADS
    free(self->dir);
    self->dir = NULL;
    if (st == HP_OK && !(self->dir = strdup(dir))) {
        Py_DECREF(path);
        PyErr_NoMemory();
        return -1;
    }
    Py_DECREF(path);
    if (st != HP_OK) {
        raise_engine(st, &err);
        return -1;
    }
    return 0;
}

static bool model_ready(ModelObject *self)
{
    if (!self->m)
        PyErr_SetString(PyExc_RuntimeError, "Model: not open");
    return self->m != NULL;
}

static PyObject *Model_info_json(ModelObject *self, PyObject *unused)
{
    (void)unused;
    if (!model_ready(self))
        return NULL;
    char *tok = NULL;
    struct hp_error err = {0};
    const bool ok = hp_tokenizer_describe(self->dir, &tok, &err) == HP_OK;
    char *s = hp_model_info_json(hp_model_get_info(self->m), self->dir, tok, ok ? NULL : err.msg);
    free(tok);
    return take_text(s);
}

static bool model_tokenizer(ModelObject *self)
{
    if (!model_ready(self))
        return false;
    if (self->tok)
        return true;
    struct hp_error err = {0};
    enum hp_status st = hp_tokenizer_open(self->dir, &self->tok, &err);
    if (st != HP_OK)
        raise_engine(st, &err);
    return st == HP_OK;
}

/* tokenize(text, special=False) -> list of ids */
static PyObject *Model_tokenize(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"text", "special", NULL};
    const char *text;
    Py_ssize_t n;
    int special = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|p:tokenize", names, &text, &n, &special) ||
        !model_tokenizer(self))
        return NULL;
    struct hp_encoding e = {0};
    struct hp_error err = {0};
    enum hp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = hp_tokenizer_encode(self->tok, text, (size_t)n, NULL, 0, special, &e, &err);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (st != HP_OK)
        return raise_engine(st, &err);
    PyObject *list = PyList_New(e.n);
    for (int i = 0; list && i < e.n; i++) {
        PyObject *v = PyLong_FromLong(e.ids[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, v);
    }
    hp_encoding_free(&e);
    return list;
}

/* decode(ids: int32 buffer, skip_special=False) -> str */
static PyObject *Model_decode(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"ids", "skip_special", NULL};
    Py_buffer b;
    int skip = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|p:decode", names, &b, &skip))
        return NULL;
    if (!model_tokenizer(self)) {
        PyBuffer_Release(&b);
        return NULL;
    }
    char *text = NULL;
    size_t n = 0;
    struct hp_error err = {0};
    enum hp_status st;
    const int count = (int)(b.len / (Py_ssize_t)sizeof(int32_t));
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = hp_tokenizer_decode(self->tok, b.buf, count, skip, &text, &n, &err);
    Py_END_ALLOW_THREADS
    self->busy--;
    PyBuffer_Release(&b);
    if (st != HP_OK)
        return raise_engine(st, &err);
    PyObject *o = PyUnicode_DecodeUTF8(text, (Py_ssize_t)n, "replace");
    free(text);
    return o;
}

/* The engine's eval progress: (done, total) to the Python callable. */
struct seq_done {
    int done, total;
};

static PyObject *make_seq_done(void *what)
{
    const struct seq_done *s = what;
    return Py_BuildValue("(ii)", s->done, s->total);
}

static void eval_progress(void *user, int done, int total)
{
    struct py_progress *p = user;
    struct seq_done s = {done, total};
    progress_call(p, make_seq_done, &s);
}

/*
 * The ablation and the gradient's metric by name, refused as `headprune eval` refuses --ablation and
 * --grad-metric (with the keyword for the option), from the engine's tables: false with the error raised.
 */
static bool eval_names(const char *ablation, const char *grad_metric, enum hp_ablation *abl)
{
    struct hp_error err = {0};
    enum hp_metric m;
    if (!hp_ablation_parse(ablation, abl)) {
        size_t at = (size_t)snprintf(err.msg, sizeof err.msg, "eval: ablation must be ");
        for (int a = 0; a < HP_ABLATE_COUNT && at < sizeof err.msg; a++)
            at += (size_t)snprintf(err.msg + at, sizeof err.msg - at, "%s%s",
                                   a == 0 ? "" : a == HP_ABLATE_COUNT - 1 ? " or " : ", ",
                                   hp_ablation_name((enum hp_ablation)a));
    } else if (grad_metric && (!hp_metric_parse(grad_metric, &m) || !hp_metric_has_grad(m))) {
        char names[128];
        hp_metric_names(names, sizeof names, true, " or ");
        snprintf(err.msg, sizeof err.msg, "eval: metric must be %s (the metrics with a gradient)", names);
    }
    if (err.msg[0])
        raise_engine(HP_ERR_ARG, &err);
    return !err.msg[0];
}

/*
 * d from ids in memory, an int32 buffer of any shape, C-contiguous (the package's Python side makes it from a
 * numpy array): the engine shapes it as a .npy file of that shape (hp_data_from_ids). False with the error
 * raised.
 */
static bool eval_ids(PyObject *data, int seq_len, const char *name, struct hp_data **d)
{
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return false;
    uint64_t dims[64]; /* numpy's most */
    const bool int32 = b.itemsize == 4 && b.format && (!strcmp(b.format, "i") || !strcmp(b.format, "<i") ||
                                                       !strcmp(b.format, "=i"));
    if (!int32 || b.ndim > 64) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "eval: data must be int32 ids of shape (rows, tokens) or (tokens,)");
        return false;
    }
    for (int i = 0; i < b.ndim; i++)
        dims[i] = (uint64_t)b.shape[i];
    struct hp_error err = {0};
    enum hp_status st = hp_data_from_ids(b.buf, b.ndim, dims, seq_len, name, d, &err);
    PyBuffer_Release(&b);
    if (st != HP_OK)
        raise_engine(st, &err);
    return st == HP_OK;
}

/*
 * eval(data, name, seq_len, mask, keep, ablation, grad, grad_metric, threads, progress, edges, circuit,
 *      circuit_text) -> JSON text.
 * data: a path (str or bytes) or ids in memory (eval_ids); name: what results and errors call ids in memory.
 */
static PyObject *Model_eval(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"data", "name", "seq_len", "mask", "keep", "ablation", "grad", "grad_metric",
                            "threads", "progress", "edges", "circuit", "circuit_text", NULL};
    PyObject *data, *progress = Py_None;
    const char *name = "array", *mask = NULL, *ablation = "zero", *grad_metric = NULL, *edges = NULL,
               *circuit = NULL, *circuit_text = NULL;
    int seq_len = 0, keep = 0, grad = 0, threads = 0;
    enum hp_ablation abl;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sizpspziOzzz:eval", names, &data, &name, &seq_len, &mask, &keep,
                                     &ablation, &grad, &grad_metric, &threads, &progress, &edges, &circuit,
                                     &circuit_text) ||
        !model_ready(self) || !engine_may_enter() || !eval_names(ablation, grad_metric, &abl))
        return NULL;
    struct hp_error err = {0};
    struct hp_data *d = NULL;
    enum hp_status st = HP_OK;
    PyObject *path = NULL;
    const struct hp_model_info *in = hp_model_get_info(self->m);
    if (PyUnicode_Check(data) || PyBytes_Check(data) || PyObject_HasAttrString(data, "__fspath__")) {
        if (!PyUnicode_FSConverter(data, &path))
            return NULL;
        const char *p = PyBytes_AS_STRING(path);
        self->busy++;
        Py_BEGIN_ALLOW_THREADS
        st = hp_data_load_for(p, self->dir, in, seq_len, &d, &err);
        Py_END_ALLOW_THREADS
        self->busy--;
        name = p;
    } else if (!eval_ids(data, seq_len, name, &d)) {
        return NULL;
    }
    if (st != HP_OK) {
        Py_XDECREF(path);
        return raise_engine(st, &err);
    }
    struct py_progress pp = {progress == Py_None ? NULL : progress, NULL, 0};
    const struct hp_eval_opts o = {
        .mask = mask,
        .keep = keep,
        .edges = edges,
        .circuit = circuit,
        .circuit_text = circuit_text,
        .ablation = abl,
        .grad = grad,
        .grad_metric = grad_metric,
        .threads = threads,
        .progress = pp.fn ? eval_progress : NULL,
        .user = &pp,
    };
    struct hp_eval_result *r = NULL;
    char *json = NULL;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    engine_enter();
    st = hp_eval(self->m, d, &o, &r, &err);
    if (st == HP_OK)
        json = hp_eval_json(in, &o, r, self->dir, name);
    engine_leave();
    Py_END_ALLOW_THREADS
    self->busy--;
    PyObject *out = NULL;
    if (progress_raise(&pp))
        free(json);
    else if (st != HP_OK)
        raise_engine(st, &err);
    else
        out = take_text(json);
    if (out && r && r->foreign) { /* as the command line warns */
        const struct hp_metrics *un = r->base ? r->base : r->mt;
        char line[HP_ERR_MSG_MAX];
        hp_foreign_warning(line, sizeof line, name, self->dir, un->loss, un->acc);
        if (PyErr_WarnEx(PyExc_UserWarning, line, 2) < 0)
            Py_CLEAR(out);
    }
    hp_eval_result_free(r);
    hp_data_free(d);
    Py_XDECREF(path);
    return out;
}

static PyObject *Model_close(ModelObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Model: in use by an evaluation (close it when that returns)");
        return NULL;
    }
    hp_tokenizer_free(self->tok);
    self->tok = NULL;
    hp_model_close(self->m);
    self->m = NULL;
    Py_RETURN_NONE;
}

static PyObject *Model_get_path(ModelObject *self, void *closure)
{
    (void)closure;
    if (!self->dir)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(self->dir);
}

static PyObject *Model_get_shape(ModelObject *self, void *closure)
{
    (void)closure;
    if (!model_ready(self))
        return NULL;
    const struct hp_model_info *in = hp_model_get_info(self->m);
    return Py_BuildValue("(iii)", in->n_layers, in->n_heads, in->n_kv_heads);
}

static PyMethodDef Model_methods[] = {
    {"info_json", (PyCFunction)Model_info_json, METH_NOARGS, "The model as `headprune inspect --json` prints it."},
    {"tokenize", (PyCFunction)(void (*)(void))Model_tokenize, METH_VARARGS | METH_KEYWORDS, "Token ids of text."},
    {"decode", (PyCFunction)(void (*)(void))Model_decode, METH_VARARGS | METH_KEYWORDS, "Text of int32 ids."},
    {"eval", (PyCFunction)(void (*)(void))Model_eval, METH_VARARGS | METH_KEYWORDS,
     "One evaluation, as `headprune eval --json` prints it."},
    {"close", (PyCFunction)Model_close, METH_NOARGS, "Release the weights."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Model_getset[] = {
    {"path", (getter)Model_get_path, NULL, "the folder as given", NULL},
    {"shape", (getter)Model_get_shape, NULL, "(n_layers, n_heads, n_kv_heads)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headprune._engine.Model",
    .tp_basicsize = sizeof(ModelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A model folder opened by the engine (headprune.Model wraps it).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Model_init,
    .tp_dealloc = (destructor)Model_dealloc,
    .tp_methods = Model_methods,
    .tp_getset = Model_getset,
};

// --- sweeps -----------------------------------------------------------------------------------

static volatile sig_atomic_t g_interrupted; /* SIGINT arrived during a sweep: it stops after its batch */
static volatile int *volatile g_stop;        /* the running sweep's stop flag */

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_stop)
        *g_stop = 1;
}

/* What the sweep stops on: a Ctrl-C or the progress callable's exception. */
struct run_state {
    struct py_progress pp;
    volatile int stop;
};

static PyObject *make_sweep_progress(void *what)
{
    const struct hp_sweep_progress *p = what;
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:s,s:d,s:d,s:d,s:s}", "done", (long long)p->done, "total",
                         (long long)p->total, "cached", (long long)p->cached, "evaluated", (long long)p->evaluated,
                         "label", p->label ? p->label : "", "elapsed", p->elapsed, "eta", p->eta, "rate", p->rate,
                         "unit", p->unit ? p->unit : "jobs");
}

static void sweep_progress(void *user, const struct hp_sweep_progress *p)
{
    struct run_state *s = user;
    if (s->pp.fn)
        progress_call(&s->pp, make_sweep_progress, (void *)p);
    if (g_interrupted || s->pp.stop)
        s->stop = 1;
}

/* run(plan, db, threads=0, batch=0, plain=False, shard_index=0, shard_count=1, progress=None, sigint=False)
 * -> dict; sigint: Ctrl-C stops the sweep after its batch, as `headprune run`'s does (the caller says so in
 * the main thread, where Python's own handler runs; it is put back afterwards) */
static PyObject *engine_run(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *names[] = {"plan", "db", "threads", "batch", "plain", "shard_index", "shard_count", "progress",
                            "sigint", NULL};
    PyObject *plan_path, *db_path, *progress = Py_None;
    int threads = 0, batch = 0, plain = 0, si = 0, sn = 1, main_thread = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|iipiiOp:run", names, PyUnicode_FSConverter, &plan_path,
                                     PyUnicode_FSConverter, &db_path, &threads, &batch, &plain, &si, &sn, &progress,
                                     &main_thread))
        return NULL;
    if (!engine_may_enter()) {
        Py_DECREF(plan_path);
        Py_DECREF(db_path);
        return NULL;
    }
    struct hp_error err = {0};
    struct hp_plan *p = NULL;
    enum hp_status st = hp_plan_load(PyBytes_AS_STRING(plan_path), &p, &err);
    if (st != HP_OK) {
        Py_DECREF(plan_path);
        Py_DECREF(db_path);
        return raise_engine(st, &err);
    }
    struct run_state s = {{progress == Py_None ? NULL : progress, NULL, 0}, 0};
    struct hp_sweep_opts o = {
        .db_path = PyBytes_AS_STRING(db_path),
        .shard_index = si,
        .shard_count = sn,
        .threads = threads,
        .batch = batch,
        .plain = plain,
        .progress = sweep_progress,
        .user = &s,
        .stop = &s.stop,
    };
    struct hp_sweep_summary sum = {0};
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint;
    g_interrupted = 0;
    g_stop = &s.stop;
    if (main_thread)
        sigaction(SIGINT, &sa, &old);
    runtime_once();
    Py_BEGIN_ALLOW_THREADS
    engine_enter();
    st = hp_sweep_run(p, &o, &sum, &err);
    engine_leave();
    Py_END_ALLOW_THREADS
    if (main_thread)
        sigaction(SIGINT, &old, NULL);
    g_stop = NULL;
    char foreign[HP_ERR_MSG_MAX] = ""; /* as `headprune run` warns: "" when the data looks right */
    if (st == HP_OK && sum.foreign && !sum.interrupted)
        hp_foreign_warning(foreign, sizeof foreign, p->data, p->model, sum.base_loss, sum.base_acc);
    /* a Ctrl-C after the sweep's last check: it finished, and Python still hears the interrupt */
    if (g_interrupted && st == HP_OK && !sum.interrupted)
        PyErr_SetInterrupt();
    hp_plan_free(p);
    Py_DECREF(plan_path);
    Py_DECREF(db_path);
    if (progress_raise(&s.pp))
        return NULL;
    if (st != HP_OK)
        return raise_engine(st, &err);
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:i,s:i,s:d,s:O,s:s,s:d,s:d}", "sweep_id", (long long)sum.sweep_id,
                         "n_jobs", (long long)sum.n_jobs, "n_run", (long long)sum.n_run, "n_repeated",
                         (long long)sum.n_repeated, "n_cached", (long long)sum.n_cached, "threads_min",
                         sum.threads_min, "threads_max", sum.threads_max, "seconds", sum.seconds, "interrupted",
                         sum.interrupted ? Py_True : Py_False, "foreign", foreign,
                         "base_loss", sum.base_loss, "base_acc", sum.base_acc);
}

// --- queries ------------------------------------------------------------------------------------

/* query_kinds() -> [(name, help, takes: {option: True})] from the engine's table */
static PyObject *engine_query_kinds(PyObject *mod, PyObject *unused)
{
    (void)mod, (void)unused;
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < HP_QUERY_KIND_COUNT; i++) {
        const struct hp_query_kind_row *k = &hp_query_kinds[i];
        const unsigned t = k->takes;
        PyObject *row = Py_BuildValue("{s:s,s:s,s:O,s:O,s:O,s:O,s:O,s:O}", "name", k->name, "help", k->help,
                                      "study", t & HP_QUERY_TAKES_STUDY ? Py_True : Py_False, "top",
                                      t & HP_QUERY_TAKES_TOP ? Py_True : Py_False, "matrix",
                                      t & HP_QUERY_TAKES_MATRIX ? Py_True : Py_False, "gates",
                                      t & HP_QUERY_TAKES_GATES ? Py_True : Py_False, "b",
                                      t & HP_QUERY_TAKES_B ? Py_True : Py_False, "sql",
                                      t & HP_QUERY_TAKES_SQL ? Py_True : Py_False);
        if (!row || PyList_Append(list, row) < 0)
            Py_CLEAR(list);
        Py_XDECREF(row);
    }
    return list;
}

/* query(db, kind, ...) -> (json text, columns, note) */
static PyObject *engine_query(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *names[] = {"db", "kind", "sweep", "metric", "top", "eps", "sql", "full_mask", "study", "matrix",
                            "gates", "db2", "sweep2", "study2", "by_layer", "timeout", NULL};
    PyObject *db;
    const char *kind;
    struct hp_query_opts q = {.eps = 0.01};
    long long sweep = 0, sweep2 = 0;
    int full_mask = 0, matrix = 0, gates = 0, by_layer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&s|LzidzpzppzLzpd:query", names, PyUnicode_FSConverter, &db, &kind,
                                     &sweep, &q.metric, &q.top, &q.eps, &q.sql, &full_mask, &q.study, &matrix,
                                     &gates, &q.db2, &sweep2, &q.study2, &by_layer, &q.timeout_s))
        return NULL;
    const struct hp_query_kind_row *row = hp_query_kind_named(kind);
    if (!row) {
        Py_DECREF(db);
        struct hp_error err = {0};
        snprintf(err.msg, sizeof err.msg, "query: no kind \"%.64s\"", kind);
        return raise_engine(HP_ERR_ARG, &err);
    }
    q.kind = row->kind;
    q.sweep_id = sweep;
    q.sweep_id2 = sweep2;
    q.full_mask = full_mask;
    q.matrix = matrix;
    q.gates = gates;
    q.by_layer = by_layer;
    struct hp_error err = {0};
    struct hp_table *t = NULL;
    enum hp_status st = hp_query_opts_check(&q, false, &err);
    if (st == HP_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = hp_query(PyBytes_AS_STRING(db), &q, &t, &err);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(db);
    if (st != HP_OK)
        return raise_engine(st, &err);
    PyObject *cols = PyList_New(t->n_cols), *json = take_text(hp_table_json(t));
    for (int c = 0; cols && c < t->n_cols; c++) {
        PyObject *s = PyUnicode_FromString(t->cols[c]);
        if (!s) {
            Py_CLEAR(cols);
            break;
        }
        PyList_SET_ITEM(cols, c, s);
    }
    PyObject *out = cols && json ? Py_BuildValue("(OOz)", json, cols, t->note) : NULL;
    Py_XDECREF(cols);
    Py_XDECREF(json);
    hp_table_free(t);
    return out;
}

// --- reports ------------------------------------------------------------------------------------

/* report(db, out, svg_dir=None, sweep=0, eps=0.01, scale="log", timeout=0) -> dict */
static PyObject *engine_report(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *names[] = {"db", "out", "svg_dir", "sweep", "eps", "scale", "timeout", NULL};
    PyObject *db, *out, *svg = NULL;
    long long sweep = 0;
    const char *scale = "log";
    struct hp_report_opts o = {.eps = 0.01};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|O&Ldsd:report", names, PyUnicode_FSConverter, &db,
                                     PyUnicode_FSConverter, &out, PyUnicode_FSConverter, &svg, &sweep, &o.eps, &scale,
                                     &o.timeout_s))
        return NULL;
    PyObject *res = NULL;
    if (strcmp(scale, "log") && strcmp(scale, "linear")) {
        struct hp_error err = {0};
        snprintf(err.msg, sizeof err.msg, "report: scale must be log or linear, not \"%.64s\"", scale);
        raise_engine(HP_ERR_ARG, &err);
        goto out;
    }
    o.scale = strcmp(scale, "log") == 0 ? HP_REPORT_SCALE_LOG : HP_REPORT_SCALE_LINEAR;
    o.db_path = PyBytes_AS_STRING(db);
    o.out = PyBytes_AS_STRING(out);
    o.svg_dir = svg ? PyBytes_AS_STRING(svg) : NULL;
    o.sweep_id = sweep;
    struct hp_report_summary sum = {0};
    struct hp_error err = {0};
    enum hp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = hp_report_write(&o, &sum, &err);
    Py_END_ALLOW_THREADS
    if (st != HP_OK)
        raise_engine(st, &err);
    else
        res = Py_BuildValue("{s:L,s:i,s:i,s:i}", "sweep_id", (long long)sum.sweep_id, "n_figures", sum.n_figures,
                            "n_left_out", sum.n_left_out, "n_svg", sum.n_svg);
out:
    Py_DECREF(db);
    Py_DECREF(out);
    Py_XDECREF(svg);
    return res;
}

// --- the module ---------------------------------------------------------------------------------

static PyObject *engine_kernel(PyObject *mod, PyObject *unused)
{
    (void)mod, (void)unused;
    runtime_once();
    return Py_BuildValue("{s:s,s:O,s:s,s:i}", "kernel", hp_runtime_kernel(), "from_env",
                         hp_runtime_kernel_from_env() ? Py_True : Py_False, "version", HP_VERSION, "numeric_version",
                         HP_NUMERIC_VERSION);
}

static PyMethodDef engine_methods[] = {
    {"run", (PyCFunction)(void (*)(void))engine_run, METH_VARARGS | METH_KEYWORDS, "Run a plan into a database."},
    {"query", (PyCFunction)(void (*)(void))engine_query, METH_VARARGS | METH_KEYWORDS, "One query's table."},
    {"query_kinds", engine_query_kinds, METH_NOARGS, "The query kinds, from the engine's table."},
    {"report", (PyCFunction)(void (*)(void))engine_report, METH_VARARGS | METH_KEYWORDS, "Write a report."},
    {"runtime", engine_kernel, METH_NOARGS, "The kernel set and the engine's versions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "headprune._engine", "headprune's engine, in process (use the headprune package).", -1,
    engine_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    Error = PyErr_NewExceptionWithDoc("headprune.Error",
                                      "An engine error: the engine's one line; .status names its kind (io, format, "
                                      "shape, arg, unsupported, sql, plan, nomem).",
                                      PyExc_ValueError, NULL);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error) < 0 || PyType_Ready(&ModelType) < 0 ||
        PyModule_AddObjectRef(m, "Model", (PyObject *)&ModelType) < 0 ||
        PyModule_AddIntConstant(m, "THREADS_MAX", HP_THREADS_MAX) < 0 ||
        PyModule_AddIntConstant(m, "SEQ_LEN_MAX", HP_SEQ_LEN_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
