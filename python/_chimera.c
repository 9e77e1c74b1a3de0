/* _chimera.c — the CPython extension behind the `chimera` package.
 *
 * A thin layer over include/chimera.h and nothing else (front ends use the public API
 * only; tests/check_layering.sh checks it). The Pythonic surface — numpy arrays, lists
 * of documents, float16, defaults, docstrings — is python/chimera/__init__.py; this file
 * takes what that layer has already shaped and checks it again, because a wrong pointer
 * here is a crash, not an exception:
 *
 *   - Arrays come in through the buffer protocol (no numpy C API, so the extension builds
 *     without numpy's headers): C-contiguous, with the format and item size checked
 *     ('f' float32, 'q'/'l' int64), every shape and length compared before the library
 *     reads a byte. Float32 C-contiguous input is read in place (chimera_corpus_wrap
 *     borrows it for the build; chimera_queries_new copies queries, which are small).
 *   - Outputs are arrays the Python layer allocated (np.empty), filled in place.
 *   - The GIL is released around every call into the library that does work (build,
 *     exact search, search and its SQL filter, tune, check, the changes
 *     add/delete/update/compact/meta_import, refresh, ids), so Python threads search one
 *     index at once; the buffers stay held by the call, so the arrays cannot go away
 *     meanwhile.
 *   - Search filters (subset=, exclude=) arrive as 1-d int64 arrays and become
 *     chimera_filter objects made for the one call and freed when it returns, on every
 *     path; per-query subsets come deduplicated (an array listed for many queries is
 *     one filter, which the library resolves once). An SQL filter (filter=, over the
 *     metadata that meta_import stores) is made by chimera_filter_sql on the handle,
 *     with the GIL released, and travels and is freed the same way.
 *   - An Index counts the calls in flight on it (under the GIL); close() refuses while
 *     any is, since the library forbids closing a handle in use. A refresh counts too;
 *     it may run while other threads search (the library swaps generations under them).
 *   - Statuses become exceptions carrying the library's message: ValueError for bad
 *     input (_INVALID_ARG, _DIM, _VALUE, _EMPTY, _FORMAT, _UNSUPPORTED), OSError for _IO,
 *     CorruptIndexError for _CORRUPT and _VERSION, MemoryError for _NOMEM, ChimeraError
 *     (RuntimeError) for the rest.
 *
 *   - Ctrl-C interrupts a build or an exact search (run_interruptible): the library call
 *     runs on a helper thread while the calling thread waits with the GIL released and,
 *     every 50 ms, takes the GIL and runs PyErr_CheckSignals(). Python runs signal
 *     handlers only on the main thread, and the library calls its callbacks from its
 *     own worker threads, so the check cannot sit in the progress bridge itself. When a
 *     handler raises (KeyboardInterrupt), a flag is set that the library's cancel
 *     callback returns; the call ends with CHIMERA_ERR_CANCELLED (a build removes its
 *     temporary directory and leaves the old index as it was) and the handler's
 *     exception is raised in its place. The cancel callback is always installed, with or
 *     without progress, and costs an atomic load per progress point. The changes (add,
 *     delete, update, compact, meta_import) run the same way: Ctrl-C cancels one before
 *     its commit (the index is then as it was); a change past its commit point
 *     completes, and the KeyboardInterrupt is raised after it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "chimera.h"

PyMODINIT_FUNC PyInit__chimera(void);

static PyObject *ChimeraError;     /* chimera.ChimeraError(RuntimeError) */
static PyObject *CorruptIndexError; /* chimera.CorruptIndexError(ChimeraError) */

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                             */
/* ---------------------------------------------------------------------------------- */

/* Raises the exception for `st` with err's message (or the status name). Returns NULL. */
static PyObject *raise_status(chimera_status st, const chimera_error *err)
{
    const char *msg = (err && err->msg[0]) ? err->msg : chimera_status_str(st);
    PyObject *type;
    switch (st) {
    case CHIMERA_ERR_INVALID_ARG:
    case CHIMERA_ERR_DIM:
    case CHIMERA_ERR_VALUE:
    case CHIMERA_ERR_EMPTY:
    case CHIMERA_ERR_FORMAT:
    case CHIMERA_ERR_UNSUPPORTED: type = PyExc_ValueError; break;
    case CHIMERA_ERR_NOMEM: type = PyExc_MemoryError; break;
    case CHIMERA_ERR_IO: type = PyExc_OSError; break;
    case CHIMERA_ERR_CORRUPT:
    case CHIMERA_ERR_VERSION: type = CorruptIndexError; break;
    default: type = ChimeraError; break;
    }
    PyErr_SetString(type, msg);
    return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Buffers                                                                            */
/* ---------------------------------------------------------------------------------- */

enum { KIND_F32, KIND_I64 };

/* Gets a C-contiguous buffer of `ndim` dimensions holding float32 or int64 items.
 * Returns 0, or -1 with ValueError set (nothing held). */
static int get_buffer(PyObject *obj, Py_buffer *view, const char *name, int kind, int ndim,
                      int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous%s array", name,
                     writable ? ", writable" : "");
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    int ok = kind == KIND_F32 ? (strcmp(f, "f") == 0 && view->itemsize == 4)
                              : ((strcmp(f, "q") == 0 || strcmp(f, "l") == 0) && view->itemsize == 8);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: expected %s items, got format '%s'", name,
                     kind == KIND_F32 ? "float32" : "int64", view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    if (view->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: expected %d dimensions, got %d", name, ndim,
                     view->ndim);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void release(Py_buffer *v)
{
    if (v->obj)
        PyBuffer_Release(v);
}

/* Queries from a [total, dim] float32 buffer and int64 lengths summing to total. */
static int make_queries(PyObject *tok_obj, PyObject *qlens_obj, chimera_queries **out)
{
    Py_buffer tok = {0}, ql = {0};
    chimera_error err = {0};
    chimera_status st = CHIMERA_OK;
    *out = NULL;
    if (get_buffer(tok_obj, &tok, "queries", KIND_F32, 2, 0) ||
        get_buffer(qlens_obj, &ql, "query lengths", KIND_I64, 1, 0))
        goto fail;
    const int64_t *lens = ql.buf;
    int64_t nq = ql.shape[0], total = 0;
    if (nq == 0) {
        PyErr_SetString(PyExc_ValueError, "queries: no queries");
        goto fail;
    }
    for (int64_t i = 0; i < nq; i++) {
        if (lens[i] <= 0 || lens[i] > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "queries: query %lld has %lld tokens",
                         (long long)i, (long long)lens[i]);
            goto fail;
        }
        total += lens[i];
    }
    if (total != tok.shape[0] || tok.shape[1] <= 0 || tok.shape[1] > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "queries: %lld rows of dimension %lld for lengths summing to %lld",
                     (long long)tok.shape[0], (long long)tok.shape[1], (long long)total);
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    st = chimera_queries_new(tok.buf, nq, (uint32_t)tok.shape[1], lens, 0, out, &err);
    Py_END_ALLOW_THREADS
    if (st != CHIMERA_OK)
        raise_status(st, &err);
fail:
    release(&tok);
    release(&ql);
    return *out ? 0 : -1;
}

/* Checks that an output buffer holds exactly nq x k items of its kind. */
static int get_output(PyObject *obj, Py_buffer *v, const char *name, int kind, int64_t nq,
                      uint32_t k)
{
    if (get_buffer(obj, v, name, kind, 2, 1))
        return -1;
    if (v->shape[0] != nq || v->shape[1] != (Py_ssize_t)k) {
        PyErr_Format(PyExc_ValueError, "%s: expected shape (%lld, %u)", name, (long long)nq, k);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static int to_u32(long long v, const char *name, uint32_t *out)
{
    if (v < 0 || v > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: %lld is out of range", name, v);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int to_threads(int v, int *out)
{
    if (v < 0 || v > CHIMERA_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads: %d is not in 0..%d", v, CHIMERA_MAX_THREADS);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Progress                                                                           */
/* ---------------------------------------------------------------------------------- */

/* Calls the Python callable (phase, fraction) from whatever thread the library uses. An
 * exception in the callable is reported as unraisable and ignored (signals are handled
 * by run_interruptible, on the calling thread). */
static void progress_cb(void *user, const char *phase, double fraction)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction((PyObject *)user, "sd", phase, fraction);
    if (!r)
        PyErr_WriteUnraisable((PyObject *)user);
    Py_XDECREF(r);
    PyGILState_Release(g);
}

/* ---------------------------------------------------------------------------------- */
/* Interruptible calls                                                                */
/* ---------------------------------------------------------------------------------- */

/* How often the waiting thread looks for a signal (PyErr_CheckSignals). */
#define SIGNAL_CHECK_NS 50000000L

/* One library call run on a helper thread: `run` does the work (no Python API) and
 * stores its status; `stop` is what the cancel callback returns. */
typedef struct interruptible {
    chimera_status (*run)(void *ctx);
    void *ctx;
    chimera_status status;
    atomic_int stop;
    int done; /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} interruptible;

static int cancel_cb(void *user)
{
    return atomic_load_explicit(&((interruptible *)user)->stop, memory_order_relaxed);
}

static void *interruptible_main(void *arg)
{
    interruptible *it = arg;
    chimera_status st = it->run(it->ctx);
    pthread_mutex_lock(&it->mu);
    it->status = st;
    it->done = 1;
    pthread_cond_signal(&it->cv);
    pthread_mutex_unlock(&it->mu);
    return NULL;
}

/* Runs it->run(it->ctx) with the GIL released, checking for signals meanwhile (see the
 * top of this file). Called with the GIL held; the caller has pointed its options'
 * cancel callback at cancel_cb with `it` as user. Returns the call's status; when a
 * signal handler raised, its exception is set (the status is then normally
 * CHIMERA_ERR_CANCELLED, or the call's own result if it finished first). */
static chimera_status run_interruptible(interruptible *it)
{
    atomic_store(&it->stop, 0);
    it->done = 0;
    it->status = CHIMERA_ERR_INTERNAL;
    pthread_mutex_init(&it->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&it->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    int raised = 0;
    if (pthread_create(&th, NULL, interruptible_main, it) != 0) {
        /* no thread: run here, not interruptible */
        Py_BEGIN_ALLOW_THREADS
        it->status = it->run(it->ctx);
        Py_END_ALLOW_THREADS
    } else {
        PyThreadState *ts = PyEval_SaveThread();
        pthread_mutex_lock(&it->mu);
        while (!it->done) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_nsec += SIGNAL_CHECK_NS;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&it->cv, &it->mu, &until);
            if (it->done || raised)
                continue;
            pthread_mutex_unlock(&it->mu);
            PyEval_RestoreThread(ts);
            if (PyErr_CheckSignals() < 0) { /* the exception stays set */
                raised = 1;
                atomic_store(&it->stop, 1);
            }
            ts = PyEval_SaveThread();
            pthread_mutex_lock(&it->mu);
        }
        pthread_mutex_unlock(&it->mu);
        pthread_join(th, NULL);
        PyEval_RestoreThread(ts);
    }
    pthread_cond_destroy(&it->cv);
    pthread_mutex_destroy(&it->mu);
    return it->status;
}

/* ---------------------------------------------------------------------------------- */
/* Corpus-level functions: build, exact search                                        */
/* ---------------------------------------------------------------------------------- */

/* Wraps tokens/doclens/ids buffers (held in the views) as a corpus. */
static int wrap_corpus(PyObject *tok_obj, PyObject *dl_obj, PyObject *ids_obj, Py_buffer *tok,
                       Py_buffer *dl, Py_buffer *ids, chimera_corpus **out)
{
    chimera_error err = {0};
    chimera_status st;
    *out = NULL;
    if (get_buffer(tok_obj, tok, "tokens", KIND_F32, 2, 0) ||
        get_buffer(dl_obj, dl, "doclens", KIND_I64, 1, 0))
        return -1;
    if (ids_obj != Py_None) {
        if (get_buffer(ids_obj, ids, "ids", KIND_I64, 1, 0))
            return -1;
        if (ids->shape[0] != dl->shape[0]) {
            PyErr_Format(PyExc_ValueError, "ids: %lld ids for %lld documents",
                         (long long)ids->shape[0], (long long)dl->shape[0]);
            return -1;
        }
    }
    if (tok->shape[1] <= 0 || tok->shape[1] > UINT32_MAX || tok->shape[0] <= 0 ||
        dl->shape[0] <= 0) {
        PyErr_Format(PyExc_ValueError, "tokens: shape (%lld, %lld) with %lld documents",
                     (long long)tok->shape[0], (long long)tok->shape[1], (long long)dl->shape[0]);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    st = chimera_corpus_wrap(tok->buf, tok->shape[0], (uint32_t)tok->shape[1], dl->buf,
                             dl->shape[0], ids->obj ? ids->buf : NULL, NULL, out, &err);
    Py_END_ALLOW_THREADS
    if (st != CHIMERA_OK) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

typedef struct build_call {
    const chimera_corpus *corpus;
    const char *path;
    chimera_build_opts *bo;
    chimera_build_report *rep;
    chimera_error *err;
} build_call;

static chimera_status build_run(void *ctx)
{
    build_call *c = ctx;
    return chimera_index_build(c->corpus, c->path, c->bo, c->rep, c->err);
}

static PyObject *py_build(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "tokens", "doclens", "ids", "bits", "threads", "seed",
                            "n_clusters", "progress", "rerank", "calibrate", NULL};
    const char *path, *rerank = "none";
    PyObject *tok_obj, *dl_obj, *ids_obj = Py_None, *progress = Py_None;
    long long bits = 4, n_clusters = 0;
    unsigned long long seed = 0;
    int threads = 0, calibrate = 1;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|OLiKLOsp", names, &path, &tok_obj, &dl_obj,
                                     &ids_obj, &bits, &threads, &seed, &n_clusters, &progress,
                                     &rerank, &calibrate))
        return NULL;
    chimera_build_opts bo;
    chimera_build_opts_default(&bo);
    bo.no_calibrate = !calibrate;
    if (chimera_rerank_parse(rerank, &bo.rerank) != CHIMERA_OK)
        return PyErr_Format(PyExc_ValueError, "rerank: '%s' is not None, 'f16', 'bf16' or 'f32'",
                            rerank);
    if (to_u32(bits, "bits", &bo.bits) || to_u32(n_clusters, "n_clusters", &bo.n_clusters) ||
        to_threads(threads, &bo.n_threads))
        return NULL;
    if (bits < 1 || bits > 8)
        return PyErr_Format(PyExc_ValueError, "bits: %lld is not in 1..8", bits);
    bo.seed = seed;
    if (progress != Py_None) {
        if (!PyCallable_Check(progress))
            return PyErr_Format(PyExc_TypeError, "progress: expected a callable");
        bo.progress = progress_cb;
        bo.progress_user = progress;
    }
    Py_buffer tok = {0}, dl = {0}, ids = {0};
    chimera_corpus *corpus = NULL;
    PyObject *ret = NULL;
    if (wrap_corpus(tok_obj, dl_obj, ids_obj, &tok, &dl, &ids, &corpus) == 0) {
        chimera_build_report rep = {0};
        chimera_error err = {0};
        build_call bc = {corpus, path, &bo, &rep, &err};
        interruptible it = {.run = build_run, .ctx = &bc};
        bo.cancel = cancel_cb;
        bo.cancel_user = &it;
        chimera_status st = run_interruptible(&it);
        if (PyErr_Occurred()) {
            /* a signal handler raised (KeyboardInterrupt): that is the error */
        } else if (st != CHIMERA_OK) {
            raise_status(st, &err);
        } else {
            PyObject *phases = PyDict_New();
            for (int i = 0; phases && i < rep.n_phases && i < CHIMERA_MAX_PHASES; i++) {
                PyObject *v = PyFloat_FromDouble(rep.seconds[i]);
                if (!v || PyDict_SetItemString(phases, rep.phase[i], v)) {
                    Py_XDECREF(v);
                    Py_CLEAR(phases);
                    break;
                }
                Py_DECREF(v);
            }
            /* the calibrated defaults: one dict per k */
            PyObject *cal = phases ? PyList_New(0) : NULL;
            for (int i = 0; cal && i < rep.n_calibrated; i++) {
                const chimera_calibration *c = &rep.calibrated[i];
                PyObject *d = Py_BuildValue(
                    "{s:I,s:I,s:I,s:I,s:I,s:d,s:d,s:O}", "k", c->k, "n_probe", c->n_probe,
                    "k_refine", c->k_refine, "k_fullbit", c->k_fullbit, "chunks", c->chunks,
                    "recall", c->recall, "recall_low", c->recall_low, "reached",
                    c->reached ? Py_True : Py_False);
                if (!d || PyList_Append(cal, d)) {
                    Py_XDECREF(d);
                    Py_CLEAR(cal);
                    break;
                }
                Py_DECREF(d);
            }
            if (!cal) Py_CLEAR(phases);
            if (phases)
                ret = Py_BuildValue("{s:d,s:K,s:I,s:d,s:K,s:N,s:N}", "seconds", rep.total_seconds,
                                    "peak_rss_bytes", (unsigned long long)rep.peak_rss_bytes,
                                    "n_clusters", rep.n_clusters, "assign_recall",
                                    rep.assign_recall, "index_bytes",
                                    (unsigned long long)rep.index_bytes, "phases", phases,
                                    "calibrated", cal);
        }
    }
    chimera_corpus_close(corpus);
    release(&tok);
    release(&dl);
    release(&ids);
    return ret;
}

typedef struct exact_call {
    const chimera_corpus *corpus;
    const chimera_queries *q;
    uint32_t k;
    const chimera_exact_opts *eo;
    int64_t *ids;
    float *scores;
    chimera_error *err;
} exact_call;

static chimera_status exact_run(void *ctx)
{
    exact_call *c = ctx;
    return chimera_corpus_search(c->corpus, c->q, c->k, c->eo, c->ids, c->scores, c->err);
}

static PyObject *py_exact_search(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"tokens", "doclens", "ids", "queries", "qlens", "k", "threads",
                            "out_ids", "out_scores", NULL};
    PyObject *tok_obj, *dl_obj, *ids_obj, *q_obj, *ql_obj, *oi_obj, *os_obj;
    long long k_ll;
    int threads = 0;
    uint32_t k;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOLiOO", names, &tok_obj, &dl_obj, &ids_obj,
                                     &q_obj, &ql_obj, &k_ll, &threads, &oi_obj, &os_obj))
        return NULL;
    chimera_exact_opts eo;
    chimera_exact_opts_default(&eo);
    if (to_u32(k_ll, "k", &k) || to_threads(threads, &eo.n_threads))
        return NULL;
    Py_buffer tok = {0}, dl = {0}, ids = {0}, oi = {0}, os = {0};
    chimera_corpus *corpus = NULL;
    chimera_queries *q = NULL;
    PyObject *ret = NULL;
    if (wrap_corpus(tok_obj, dl_obj, ids_obj, &tok, &dl, &ids, &corpus) == 0 &&
        make_queries(q_obj, ql_obj, &q) == 0 &&
        get_output(oi_obj, &oi, "out_ids", KIND_I64, chimera_queries_count(q), k) == 0 &&
        get_output(os_obj, &os, "out_scores", KIND_F32, chimera_queries_count(q), k) == 0) {
        chimera_error err = {0};
        exact_call ec = {corpus, q, k, &eo, oi.buf, os.buf, &err};
        interruptible it = {.run = exact_run, .ctx = &ec};
        eo.cancel = cancel_cb;
        eo.cancel_user = &it;
        chimera_status st = run_interruptible(&it);
        if (PyErr_Occurred())
            ; /* a signal handler raised (KeyboardInterrupt): that is the error */
        else if (st != CHIMERA_OK)
            raise_status(st, &err);
        else
            ret = Py_NewRef(Py_None);
    }
    chimera_queries_free(q);
    chimera_corpus_close(corpus);
    release(&tok);
    release(&dl);
    release(&ids);
    release(&oi);
    release(&os);
    return ret;
}

static PyObject *py_recall(PyObject *self, PyObject *args)
{
    PyObject *run_obj, *truth_obj;
    long long k_ll;
    uint32_t k;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOL", &run_obj, &truth_obj, &k_ll) || to_u32(k_ll, "k", &k))
        return NULL;
    if (k == 0)
        return PyErr_Format(PyExc_ValueError, "k: must be at least 1");
    Py_buffer run = {0}, truth = {0};
    PyObject *ret = NULL;
    if (get_buffer(run_obj, &run, "run_ids", KIND_I64, 2, 0) == 0 &&
        get_buffer(truth_obj, &truth, "truth_ids", KIND_I64, 2, 0) == 0) {
        if (run.shape[0] != truth.shape[0])
            PyErr_Format(PyExc_ValueError, "run_ids has %lld queries, truth_ids %lld",
                         (long long)run.shape[0], (long long)truth.shape[0]);
        else if (run.shape[1] > UINT32_MAX || truth.shape[1] > UINT32_MAX)
            PyErr_SetString(PyExc_ValueError, "too many results per query");
        else
            ret = PyFloat_FromDouble(chimera_results_eval_recall(
                run.buf, (uint32_t)run.shape[1], truth.buf, (uint32_t)truth.shape[1],
                run.shape[0], k));
    }
    release(&run);
    release(&truth);
    return ret;
}

static PyObject *py_info(PyObject *self, PyObject *args)
{
    const char *path;
    (void)self;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    chimera_index_info in;
    chimera_error err = {0};
    chimera_status st;
    Py_BEGIN_ALLOW_THREADS
    st = chimera_index_info_read(path, &in, &err);
    Py_END_ALLOW_THREADS
    if (st != CHIMERA_OK)
        return raise_status(st, &err);
    PyObject *sections = PyList_New(0), *phases = PyDict_New();
    for (uint32_t i = 0; sections && i < in.n_sections && i < CHIMERA_INFO_MAX_SECTIONS; i++) {
        PyObject *s = Py_BuildValue("{s:s,s:s,s:K,s:O}", "name", in.sections[i].name, "dtype",
                                    in.sections[i].dtype, "bytes",
                                    (unsigned long long)in.sections[i].bytes, "device_resident",
                                    in.sections[i].device_resident ? Py_True : Py_False);
        if (!s || PyList_Append(sections, s))
            Py_CLEAR(sections);
        Py_XDECREF(s);
    }
    for (int i = 0; phases && i < in.n_phases && i < CHIMERA_MAX_PHASES; i++) {
        PyObject *v = PyFloat_FromDouble(in.phase_seconds[i]);
        if (!v || PyDict_SetItemString(phases, in.phase[i], v))
            Py_CLEAR(phases);
        Py_XDECREF(v);
    }
    if (!sections || !phases) {
        Py_XDECREF(sections);
        Py_XDECREF(phases);
        return NULL;
    }
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%u.%u", in.format_major, in.format_minor);
    PyObject *ret = Py_BuildValue(
        "{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:L,s:L,s:{s:L,s:L,s:L,s:d,s:d,s:I},s:K,s:K,s:K,"
        "s:N,s:s,s:i,s:d,s:d,s:K,s:N,s:K}",
        "format", fmt, "library_version", in.library_version, "dim", in.dim, "dim_pad",
        in.dim_pad, "bits", in.bits, "n_clusters", in.n_clusters, "graph_degree",
        in.graph_degree, "n_docs", (long long)in.n_docs, "n_tokens", (long long)in.n_tokens,
        "lists", "min", (long long)in.list_min, "median", (long long)in.list_median, "max",
        (long long)in.list_max, "mean", in.list_mean, "imbalance", in.list_imbalance, "empty",
        in.list_empty, "bytes_device", (unsigned long long)in.bytes_device, "bytes_host",
        (unsigned long long)in.bytes_host, "bytes_total", (unsigned long long)in.bytes_total,
        "sections", sections, "seed", in.seed, "build_threads", in.build_threads,
        "assign_recall", in.assign_recall, "build_seconds", in.build_seconds,
        "build_peak_rss", (unsigned long long)in.build_peak_rss, "build_phases", phases,
        "generation", (unsigned long long)in.generation);
    if (!ret)
        return NULL;
    /* The living index (segments, deletions, drift): a second dict merged in, since one
     * Py_BuildValue of every field would be unreadable. n_docs and n_tokens above
     * include deleted documents (n_docs - n_deleted is what a search can return). */
    const char *rr = in.rerank != CHIMERA_RERANK_NONE ? chimera_rerank_name(in.rerank) : NULL;
    PyObject *more = Py_BuildValue(
        "{s:L,s:I,s:I,s:L,s:L,s:d,s:L,s:d,s:O,s:z,s:K}", "n_deleted", (long long)in.n_deleted,
        "n_segments", in.n_segments, "n_deletion_lists", in.n_deletion_lists, "appended_docs",
        (long long)in.appended_docs, "appended_tokens", (long long)in.appended_tokens,
        "assign_sim_p10", in.assign_sim_p10, "drift_tokens", (long long)in.drift_tokens,
        "drift_below", in.drift_below, "recluster_advised",
        in.recluster_advised ? Py_True : Py_False, "rerank", rr, "bytes_rerank",
        (unsigned long long)in.bytes_rerank);
    if (!more || PyDict_Update(ret, more)) {
        Py_XDECREF(more);
        Py_DECREF(ret);
        return NULL;
    }
    Py_DECREF(more);
    return ret;
}

static PyObject *py_runtime_info(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    chimera_runtime_info ri;
    Py_BEGIN_ALLOW_THREADS
    chimera_runtime_info_get(&ri);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("{s:s,s:s,s:z,s:i,s:O,s:i,s:s,s:O,s:s}", "version", chimera_version(),
                         "simd", ri.simd, "blas_core", ri.blas_core, "n_cpus", ri.n_cpus,
                         "cuda_compiled", ri.cuda_compiled ? Py_True : Py_False,
                         "n_cuda_devices", ri.n_cuda_devices, "cuda_status", ri.cuda_status,
                         "blas_threads_kept", ri.blas_threads_kept ? Py_True : Py_False,
                         "blas_suggested_coretype",
                         ri.blas_suggested_coretype ? ri.blas_suggested_coretype : "");
}

/* ---------------------------------------------------------------------------------- */
/* Changing an index: add, delete, update, compact                                    */
/* ---------------------------------------------------------------------------------- */

/* A UTF-8 view of the str `obj` with no NUL inside (the library takes C strings, and
 * an embedded NUL would silently cut the SQL short). NULL with ValueError set. */
static const char *c_string(PyObject *obj, const char *name)
{
    Py_ssize_t len;
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8AndSize(obj, &len) : NULL;
    if (!s) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_UnicodeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: expected a str", name);
        }
        return NULL;
    }
    if ((Py_ssize_t)strlen(s) != len) {
        PyErr_Format(PyExc_ValueError, "%s: contains a NUL character", name);
        return NULL;
    }
    return s;
}

/* An SQL filter's arguments (a sequence of str, already converted by the Python layer,
 * or None) as C strings in *argv (PyMem_Free it), owned by *seq (a tuple of its own: a
 * list could change, and free its strings, while the GIL is released; Py_DECREF it
 * after the library call). Returns 0, or -1 with an exception set and nothing to free. */
static int sql_argv(PyObject *args_obj, PyObject **seq, const char ***argv, Py_ssize_t *n)
{
    *argv = NULL;
    *seq = args_obj == Py_None ? PyTuple_New(0) : PySequence_Tuple(args_obj);
    if (!*seq) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "filter_args: expected a sequence of str");
        }
        return -1;
    }
    *n = PyTuple_GET_SIZE(*seq);
    if (*n > 4096) {
        PyErr_Format(PyExc_ValueError, "filter_args: %zd arguments (at most 4096)", *n);
        goto fail;
    }
    *argv = PyMem_Calloc((size_t)*n + 1, sizeof **argv);
    if (!*argv) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        char name[40];
        snprintf(name, sizeof name, "filter_args[%zd]", i);
        if (!((*argv)[i] = c_string(PyTuple_GET_ITEM(*seq, i), name)))
            goto fail;
    }
    return 0;
fail:
    PyMem_Free(*argv);
    *argv = NULL;
    Py_CLEAR(*seq);
    return -1;
}

/* Writers work on the directory, not on an open handle (chimera.h): each is one atomic
 * commit under the index's writer lock, and handles see it after Index.refresh. The
 * call runs on run_interruptible's helper thread, so a progress callable never runs on
 * the main thread (where a KeyboardInterrupt raised inside it would be swallowed as
 * unraisable) and the GIL is released meanwhile. Ctrl-C reaches the change through its
 * cancel callback: before the commit it ends with CHIMERA_ERR_CANCELLED and nothing
 * changed; a change already committing completes. Either way the handler's
 * KeyboardInterrupt is what the call raises. */

enum { CHANGE_ADD, CHANGE_UPDATE, CHANGE_DELETE, CHANGE_COMPACT, CHANGE_META };

typedef struct change_call {
    int op;
    const char *path;
    const chimera_corpus *corpus; /* add, update */
    const int64_t *ids;           /* delete by ids */
    int64_t n_ids;
    const char *sql;              /* delete by filter (ids NULL): the expression */
    const char **sql_args;
    int n_sql_args;
    const char *meta_path;        /* meta import: the records file */
    int meta_csv;                 /* meta import: 1 CSV, 0 JSON Lines */
    const chimera_update_opts *uo;
    chimera_update_report *rep;
    chimera_error *err;
} change_call;

static chimera_status change_run(void *ctx)
{
    change_call *c = ctx;
    switch (c->op) {
    case CHANGE_ADD: return chimera_index_add(c->path, c->corpus, c->uo, c->rep, c->err);
    case CHANGE_UPDATE: return chimera_index_update(c->path, c->corpus, c->uo, c->rep, c->err);
    case CHANGE_DELETE:
        if (c->sql)
            return chimera_index_delete_where(c->path, c->sql, c->sql_args, c->n_sql_args, c->uo,
                                              c->rep, c->err);
        return chimera_index_delete(c->path, c->ids, c->n_ids, c->uo, c->rep, c->err);
    case CHANGE_META:
        return chimera_index_meta_import(c->path, c->meta_path, c->meta_csv, c->uo, c->rep,
                                         c->err);
    default: return chimera_index_compact(c->path, c->uo, c->rep, c->err);
    }
}

static PyObject *update_report_to_dict(const chimera_update_report *r)
{
    PyObject *drift = r->drift_below >= 0 ? PyFloat_FromDouble(r->drift_below)
                                          : Py_NewRef(Py_None);
    if (!drift)
        return NULL;
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:L,s:K,s:d,s:d,s:d,s:d,s:N,s:O,s:L,s:L,s:I,s:K,s:d,s:L,s:i}",
        "docs_added", (long long)r->docs_added, "tokens_added", (long long)r->tokens_added,
        "docs_deleted", (long long)r->docs_deleted, "ids_missing", (long long)r->ids_missing,
        "generation", (unsigned long long)r->generation, "seconds", r->seconds,
        "assign_seconds", r->assign_seconds, "encode_seconds", r->encode_seconds,
        "write_seconds", r->write_seconds, "drift_below", drift, "merged",
        r->merged ? Py_True : Py_False, "n_docs", (long long)r->n_docs, "n_deleted",
        (long long)r->n_deleted, "n_segments", r->n_segments, "peak_rss_bytes",
        (unsigned long long)r->peak_rss_bytes, "assign_recall", r->assign_recall,
        "meta_records", (long long)r->meta_records, "meta_repaired", r->meta_repaired);
}

/* Runs one change with its options filled; returns the report as a dict, or NULL. */
static PyObject *run_change(change_call *c)
{
    chimera_update_report rep;
    memset(&rep, 0, sizeof rep);
    chimera_error err = {0};
    c->rep = &rep;
    c->err = &err;
    interruptible it = {.run = change_run, .ctx = c};
    chimera_update_opts uo = *c->uo;
    uo.cancel = cancel_cb;
    uo.cancel_user = &it;
    c->uo = &uo;
    chimera_status st = run_interruptible(&it);
    if (PyErr_Occurred())
        return NULL; /* a signal handler raised (KeyboardInterrupt): that is the error */
    if (st != CHIMERA_OK)
        return raise_status(st, &err);
    return update_report_to_dict(&rep);
}

static int update_opts_from(chimera_update_opts *uo, int missing_ok, int no_sync,
                            int lock_timeout_ms, PyObject *progress)
{
    chimera_update_opts_default(uo);
    uo->missing_ok = missing_ok;
    uo->no_sync = no_sync;
    uo->lock_timeout_ms = lock_timeout_ms;
    if (progress && progress != Py_None) {
        if (!PyCallable_Check(progress)) {
            PyErr_SetString(PyExc_TypeError, "progress: expected a callable");
            return -1;
        }
        uo->progress = progress_cb;
        uo->progress_user = progress;
    }
    return 0;
}

/* add and update: the documents (with their ids) go in as a borrowed corpus. */
static PyObject *add_or_update(int op, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "tokens", "doclens", "ids", "missing_ok", "no_sync",
                            "lock_timeout_ms", "metadata", NULL};
    const char *path, *metadata = NULL;
    PyObject *tok_obj, *dl_obj, *ids_obj;
    int missing_ok = 0, no_sync = 0, lock_ms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOOO|ppiz", names, &path, &tok_obj, &dl_obj,
                                     &ids_obj, &missing_ok, &no_sync, &lock_ms, &metadata))
        return NULL;
    if (ids_obj == Py_None)
        return PyErr_Format(PyExc_ValueError,
                            "ids: documents to %s need ids (int64, one per document)",
                            op == CHANGE_ADD ? "add" : "update");
    chimera_update_opts uo;
    if (update_opts_from(&uo, missing_ok, no_sync, lock_ms, NULL))
        return NULL;
    uo.metadata = metadata; /* a JSON Lines file (the Python layer writes one for dicts) */
    Py_buffer tok = {0}, dl = {0}, ids = {0};
    chimera_corpus *corpus = NULL;
    PyObject *ret = NULL;
    if (wrap_corpus(tok_obj, dl_obj, ids_obj, &tok, &dl, &ids, &corpus) == 0) {
        change_call c = {.op = op, .path = path, .corpus = corpus, .uo = &uo};
        ret = run_change(&c);
    }
    chimera_corpus_close(corpus);
    release(&tok);
    release(&dl);
    release(&ids);
    return ret;
}

static PyObject *py_add(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    return add_or_update(CHANGE_ADD, args, kw);
}

static PyObject *py_update(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    return add_or_update(CHANGE_UPDATE, args, kw);
}

/* Deletes by ids, or (sql, sql_args) the documents whose metadata satisfies an SQL
 * filter, evaluated by the library under the writer lock. */
static PyObject *py_delete(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "ids", "missing_ok", "no_sync", "lock_timeout_ms", "sql",
                            "sql_args", NULL};
    const char *path;
    PyObject *ids_obj, *sql = Py_None, *sql_args = Py_None;
    int missing_ok = 0, no_sync = 0, lock_ms = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|ppiOO", names, &path, &ids_obj, &missing_ok,
                                     &no_sync, &lock_ms, &sql, &sql_args))
        return NULL;
    if ((ids_obj == Py_None) == (sql == Py_None))
        return PyErr_Format(PyExc_ValueError, "give ids or a filter");
    chimera_update_opts uo;
    if (update_opts_from(&uo, missing_ok, no_sync, lock_ms, NULL))
        return NULL;
    change_call c = {.op = CHANGE_DELETE, .path = path, .uo = &uo};
    if (sql != Py_None) {
        PyObject *seq;
        Py_ssize_t n;
        if (!(c.sql = c_string(sql, "filter")) || sql_argv(sql_args, &seq, &c.sql_args, &n))
            return NULL;
        c.n_sql_args = (int)n;
        PyObject *ret = run_change(&c);
        PyMem_Free(c.sql_args);
        Py_DECREF(seq);
        return ret;
    }
    Py_buffer ids = {0};
    if (get_buffer(ids_obj, &ids, "ids", KIND_I64, 1, 0))
        return NULL;
    c.ids = ids.buf;
    c.n_ids = ids.shape[0];
    PyObject *ret = run_change(&c);
    release(&ids);
    return ret;
}

/* Document metadata for SQL filters: the records file (JSON Lines, or CSV with csv=True)
 * replaces the index's metadata in one commit, run like the other changes. */
static PyObject *py_meta_import(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "file", "csv", "no_sync", "lock_timeout_ms", NULL};
    const char *path, *file;
    int csv = 0, no_sync = 0, lock_ms = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|ppi", names, &path, &file, &csv, &no_sync,
                                     &lock_ms))
        return NULL;
    chimera_update_opts uo;
    if (update_opts_from(&uo, 0, no_sync, lock_ms, NULL))
        return NULL;
    change_call c = {.op = CHANGE_META, .path = path, .meta_path = file, .meta_csv = csv,
                     .uo = &uo};
    return run_change(&c);
}

static PyObject *py_compact(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "no_sync", "lock_timeout_ms", "progress", "recluster",
                            "n_clusters", "n_threads", "seed", NULL};
    const char *path;
    int no_sync = 0, lock_ms = 0, recluster = 0, threads = 0;
    unsigned int clusters = 0;
    unsigned long long seed = 0;
    PyObject *progress = Py_None;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|piOpIiK", names, &path, &no_sync, &lock_ms,
                                     &progress, &recluster, &clusters, &threads, &seed))
        return NULL;
    chimera_update_opts uo;
    if (update_opts_from(&uo, 0, no_sync, lock_ms, progress))
        return NULL;
    uo.recluster = recluster;
    uo.n_clusters = clusters;
    uo.n_threads = threads;
    uo.seed = seed;
    change_call c = {.op = CHANGE_COMPACT, .path = path, .uo = &uo};
    return run_change(&c);
}

/* ---------------------------------------------------------------------------------- */
/* Search parameters <-> dicts                                                        */
/* ---------------------------------------------------------------------------------- */

static int params_from_dict(PyObject *d, chimera_search_params *p)
{
    memset(p, 0, sizeof *p);
    if (d == Py_None)
        return 0;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "params: expected a dict");
        return -1;
    }
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &val)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!name) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "params: keys must be strings");
            return -1;
        }
        uint32_t *u = !strcmp(name, "n_probe")     ? &p->n_probe
                      : !strcmp(name, "k_refine")  ? &p->k_refine
                      : !strcmp(name, "k_fullbit") ? &p->k_fullbit
                      : !strcmp(name, "chunks")    ? &p->chunks
                      : !strcmp(name, "rerank_depth") ? &p->rerank_depth
                      : !strcmp(name, "k_interaction") ? &p->k_interaction
                                                   : NULL;
        if (u) {
            long long v = PyLong_AsLongLong(val);
            if (v == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "params[%s]: expected an integer", name);
                return -1;
            }
            if (to_u32(v, name, u))
                return -1;
            continue;
        }
        if (!strcmp(name, "impute_scale")) {
            double x = PyFloat_AsDouble(val);
            if (x == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "params[impute_scale]: expected a number");
                return -1;
            }
            p->impute_scale = (float)x; /* outside [0, 1] (NaN too): the search refuses it */
            continue;
        }
        const char *s = PyUnicode_Check(val) ? PyUnicode_AsUTF8(val) : NULL;
        if (!strcmp(name, "impute") || !strcmp(name, "probe")) {
            chimera_status st = !s ? CHIMERA_ERR_INVALID_ARG
                                : name[0] == 'i' ? chimera_impute_parse(s, &p->impute)
                                                 : chimera_probe_parse(s, &p->probe);
            if (st != CHIMERA_OK) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "params[%s]: unknown value", name);
                return -1;
            }
            /* given, even as the default, it is the caller's over a profile's (recall=) */
            p->chosen |= name[0] == 'i' ? CHIMERA_CHOSE_IMPUTE : CHIMERA_CHOSE_PROBE;
            continue;
        }
        PyErr_Format(PyExc_ValueError,
                     "params: unknown key '%s' (n_probe, k_refine, k_fullbit, chunks, impute, probe, "
                     "rerank_depth, k_interaction, impute_scale)",
                     name);
        return -1;
    }
    return 0;
}

static PyObject *params_to_dict(const chimera_search_params *p)
{
    const char *imp = chimera_impute_name(p->impute), *pr = chimera_probe_name(p->probe);
    /* k_interaction at or above k_refine is off: shown as 0 */
    uint32_t ki = p->k_interaction < p->k_refine ? p->k_interaction : 0;
    return Py_BuildValue("{s:I,s:I,s:I,s:I,s:s,s:s,s:I,s:I,s:d}", "n_probe", p->n_probe,
                         "k_refine", p->k_refine, "k_fullbit", p->k_fullbit, "chunks", p->chunks,
                         "impute", imp ? imp : "?", "probe", pr ? pr : "?", "rerank_depth",
                         p->rerank_depth, "k_interaction", ki, "impute_scale",
                         (double)p->impute_scale);
}

/* ---------------------------------------------------------------------------------- */
/* Search filters                                                                     */
/* ---------------------------------------------------------------------------------- */

/* The filters of one search call, made from what chimera.Index.search shaped (ids as
 * 1-d int64 arrays) and freed when the call ends: either one filter for every query
 * (`all`), or per-query filters, each distinct array made into a filter once (a list
 * that repeats one array, [allowed] * nq, then costs one filter, and the library
 * resolves each distinct filter once per call) and per_query[i] pointing at query i's
 * (NULL: none). */
typedef struct search_filters {
    chimera_filter *all;
    chimera_filter **distinct;
    Py_ssize_t n_distinct;
    const chimera_filter **per_query;
} search_filters;

static void filters_free(search_filters *sf)
{
    chimera_filter_free(sf->all);
    for (Py_ssize_t i = 0; sf->distinct && i < sf->n_distinct; i++)
        chimera_filter_free(sf->distinct[i]);
    PyMem_Free(sf->distinct);
    PyMem_Free(sf->per_query);
    memset(sf, 0, sizeof *sf);
}

/* A filter of the ids in the 1-d int64 buffer `obj` (copied: the buffer is released
 * before returning). Returns 0, or -1 with an exception set. */
static int make_filter(PyObject *obj, const char *name, int exclude, chimera_filter **out)
{
    Py_buffer v = {0};
    *out = NULL;
    if (get_buffer(obj, &v, name, KIND_I64, 1, 0))
        return -1;
    chimera_error err = {0};
    chimera_status st = chimera_filter_new(v.buf, v.shape[0], exclude, out, &err);
    release(&v);
    if (st != CHIMERA_OK) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

/* Fills *sf from Index.search's filter arguments: `filter` (ids, or None) with
 * `exclude`, or `query_filters` (a sequence of id arrays) with `query_filter_of` (int64
 * [nq]: for each query the position of its array in query_filters, -1 for none).
 * Returns 0, or -1 with an exception set and nothing held. */
static int filters_from(PyObject *filter, int exclude, PyObject *qf, PyObject *qf_of,
                        int64_t nq, search_filters *sf)
{
    memset(sf, 0, sizeof *sf);
    if (filter != Py_None && qf != Py_None) {
        PyErr_SetString(PyExc_ValueError, "filter and query_filters: give one, not both");
        return -1;
    }
    if (filter != Py_None)
        return make_filter(filter, exclude ? "exclude" : "subset", exclude, &sf->all);
    if (qf == Py_None)
        return 0;
    if (exclude) {
        PyErr_SetString(PyExc_ValueError, "query_filters: per-query filters are subsets");
        return -1;
    }
    PyObject *seq = PySequence_Fast(qf, "query_filters: expected a sequence of id arrays");
    if (!seq)
        return -1;
    Py_buffer of = {0};
    int rc = -1;
    if (get_buffer(qf_of, &of, "query_filter_of", KIND_I64, 1, 0))
        goto done;
    if (of.shape[0] != nq) {
        PyErr_Format(PyExc_ValueError, "subset: %lld per-query subsets for %lld queries",
                     (long long)of.shape[0], (long long)nq);
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    sf->distinct = PyMem_Calloc((size_t)n + 1, sizeof *sf->distinct);
    sf->per_query = PyMem_Calloc((size_t)nq + 1, sizeof *sf->per_query);
    if (!sf->distinct || !sf->per_query) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "subset (array %zd)", i);
        if (make_filter(PySequence_Fast_GET_ITEM(seq, i), name, 0, &sf->distinct[i]))
            goto done;
        sf->n_distinct = i + 1;
    }
    const int64_t *at = of.buf;
    for (int64_t q = 0; q < nq; q++) {
        if (at[q] < -1 || at[q] >= n) {
            PyErr_Format(PyExc_ValueError, "query_filter_of[%lld]: %lld is not in -1..%zd",
                         (long long)q, (long long)at[q], n - 1);
            goto done;
        }
        sf->per_query[q] = at[q] < 0 ? NULL : sf->distinct[at[q]];
    }
    rc = 0;
done:
    release(&of);
    Py_DECREF(seq);
    if (rc)
        filters_free(sf);
    return rc;
}

/* ---------------------------------------------------------------------------------- */
/* The Index type                                                                     */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    chimera_index *index;
    chimera_backend backend;
    int busy; /* calls in flight with the GIL released (changed only under the GIL) */
} IndexObject;

static int index_live(IndexObject *self)
{
    if (!self->index) {
        PyErr_SetString(PyExc_ValueError, "the index is closed");
        return -1;
    }
    return 0;
}

/* The filter of an SQL expression over the index's metadata (Index.search's filter=),
 * with `args` bound to its `?` in order. The library runs it read-only, with its own
 * time limit, on the handle's generation; the GIL is released meanwhile and the call
 * counted as in flight. Returns 0, or -1 with an exception set and *out NULL. */
static int sql_filter(IndexObject *self, PyObject *expr_obj, PyObject *args_obj,
                      chimera_filter **out)
{
    *out = NULL;
    const char *expr = c_string(expr_obj, "filter");
    PyObject *seq;
    const char **argv;
    Py_ssize_t n;
    if (!expr || sql_argv(args_obj, &seq, &argv, &n))
        return -1;
    chimera_error err = {0};
    chimera_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = chimera_filter_sql(self->index, expr, argv, (int)n, 0, out, &err);
    Py_END_ALLOW_THREADS
    self->busy--;
    PyMem_Free(argv);
    Py_DECREF(seq);
    if (st != CHIMERA_OK) {
        raise_status(st, &err);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int Index_init(IndexObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "backend", "verify", NULL};
    const char *path, *backend = "auto";
    int verify = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|sp", names, &path, &backend, &verify))
        return -1;
    if (self->index) {
        PyErr_SetString(PyExc_RuntimeError, "the index is already open");
        return -1;
    }
    if (chimera_backend_parse(backend, &self->backend) != CHIMERA_OK) {
        PyErr_Format(PyExc_ValueError, "backend: '%s' is not auto, cpu or cuda", backend);
        return -1;
    }
    chimera_open_opts oo;
    chimera_open_opts_default(&oo);
    oo.verify = verify;
    chimera_error err = {0};
    chimera_status st;
    Py_BEGIN_ALLOW_THREADS
    st = chimera_index_open(path, &oo, &self->index, &err);
    Py_END_ALLOW_THREADS
    if (st != CHIMERA_OK) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

static void Index_dealloc(IndexObject *self)
{
    /* No call can be in flight: each holds a reference to self. */
    chimera_index_close(self->index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Index_close(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy)
        return PyErr_Format(PyExc_RuntimeError,
                            "close: %d call(s) on this index are still running", self->busy);
    chimera_index_close(self->index);
    self->index = NULL;
    Py_RETURN_NONE;
}

static PyObject *Index_search(IndexObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"queries", "qlens", "k", "params", "recall", "threads",
                            "out_ids", "out_scores", "latency", "filter", "exclude",
                            "query_filters", "query_filter_of", "sql", "sql_args", NULL};
    PyObject *q_obj, *ql_obj, *params = Py_None, *recall = Py_None, *oi_obj, *os_obj;
    PyObject *filter = Py_None, *qf = Py_None, *qf_of = Py_None, *sql = Py_None;
    PyObject *sql_args = NULL;
    long long k_ll;
    int threads = 0, latency = 0, exclude = 0;
    uint32_t k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOLOOiOO|pOpOOOO", names, &q_obj, &ql_obj,
                                     &k_ll, &params, &recall, &threads, &oi_obj, &os_obj,
                                     &latency, &filter, &exclude, &qf, &qf_of, &sql, &sql_args))
        return NULL;
    if (sql != Py_None && (filter != Py_None || qf != Py_None))
        return PyErr_Format(PyExc_ValueError,
                            "filter: an SQL filter cannot be combined with subset or exclude");
    if (sql == Py_None && sql_args && sql_args != Py_None)
        return PyErr_Format(PyExc_ValueError, "filter_args: given without a filter");
    chimera_search_opts so;
    chimera_search_opts_default(&so);
    chimera_search_params sp;
    if (index_live(self) || to_u32(k_ll, "k", &k) || to_threads(threads, &so.n_threads) ||
        params_from_dict(params, &sp))
        return NULL;
    if (k == 0)
        return PyErr_Format(PyExc_ValueError, "k: must be at least 1");
    so.backend = self->backend;
    so.latency_mode = latency;
    if (recall != Py_None) {
        double target = PyFloat_AsDouble(recall);
        if (target == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(target > 0 && target <= 1))
            return PyErr_Format(PyExc_ValueError, "recall: %S is not in (0, 1]", recall);
        chimera_error err = {0};
        chimera_search_params tuned; /* checked here for a clear error; the search takes the
                                        fields params left unset from it */
        chimera_status st = chimera_index_profile_get(self->index, k, target, &tuned, &err);
        if (st == CHIMERA_ERR_EMPTY && err.msg[0])
            return PyErr_Format(PyExc_ValueError, "recall: %s", err.msg);
        if (st == CHIMERA_ERR_EMPTY)
            return PyErr_Format(PyExc_ValueError,
                                "recall: the index has no tuned profile for k=%u at recall >= %S "
                                "(run Index.tune with save=True first; a profile saved by "
                                "another handle or process shows after Index.refresh())",
                                k, recall);
        if (st != CHIMERA_OK)
            return raise_status(st, &err);
        sp.recall = target;
    }
    chimera_queries *q = NULL;
    Py_buffer oi = {0}, os = {0};
    search_filters sf = {0};
    PyObject *ret = NULL;
    if (make_queries(q_obj, ql_obj, &q) == 0 &&
        get_output(oi_obj, &oi, "out_ids", KIND_I64, chimera_queries_count(q), k) == 0 &&
        get_output(os_obj, &os, "out_scores", KIND_F32, chimera_queries_count(q), k) == 0 &&
        filters_from(filter, exclude, qf, qf_of, chimera_queries_count(q), &sf) == 0 &&
        (sql == Py_None ||
         sql_filter(self, sql, sql_args ? sql_args : Py_None, &sf.all) == 0) &&
        index_live(self) == 0) { /* again: the checks above let other threads run (close) */
        so.filter = sf.all;
        so.query_filters = sf.per_query;
        chimera_search_profile prof;
        memset(&prof, 0, sizeof prof);
        chimera_error err = {0};
        chimera_status st;
        self->busy++;
        Py_BEGIN_ALLOW_THREADS
        st = chimera_index_search(self->index, q, k, &sp, &so, oi.buf, os.buf, &prof, &err);
        Py_END_ALLOW_THREADS
        self->busy--;
        if (st != CHIMERA_OK)
            raise_status(st, &err);
        else
            ret = Py_BuildValue("{s:d,s:s,s:K,s:K,s:K,s:d,s:K,s:d,s:K,s:K,s:K}", "seconds",
                                prof.seconds,
                                "backend", prof.backend, "n_refined",
                                (unsigned long long)prof.n_refined, "n_scored1",
                                (unsigned long long)prof.n_scored1, "n_fullbit",
                                (unsigned long long)prof.n_fullbit, "t_rerank", prof.t_rerank,
                                "n_reranked", (unsigned long long)prof.n_reranked,
                                "t_interaction", prof.t_interaction, "n_rows",
                                (unsigned long long)prof.n_rows, "n_probed",
                                (unsigned long long)prof.n_probed, "n_walked",
                                (unsigned long long)prof.n_walked);
    }
    filters_free(&sf);
    chimera_queries_free(q);
    release(&oi);
    release(&os);
    return ret;
}

static PyObject *Index_tune(IndexObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"queries", "qlens", "truth", "k", "target_recall", "threads",
                            "heldout", "seed", NULL};
    PyObject *q_obj, *ql_obj, *t_obj;
    long long k_ll;
    double target, heldout = 0;
    unsigned long long seed = 0;
    int threads = 0;
    uint32_t k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOLdi|dK", names, &q_obj, &ql_obj, &t_obj, &k_ll,
                                     &target, &threads, &heldout, &seed))
        return NULL;
    if (heldout != 0 && !(heldout > 0 && heldout < 1))
        return PyErr_Format(PyExc_ValueError, "heldout: %g is not a fraction in (0, 1)", heldout);
    chimera_search_opts so;
    chimera_search_opts_default(&so);
    if (index_live(self) || to_u32(k_ll, "k", &k) || to_threads(threads, &so.n_threads))
        return NULL;
    if (k == 0)
        return PyErr_Format(PyExc_ValueError, "k: must be at least 1");
    if (!(target > 0 && target <= 1))
        return PyErr_SetString(PyExc_ValueError, "target_recall: not in (0, 1]"), NULL;
    so.backend = self->backend;
    chimera_queries *q = NULL;
    Py_buffer truth = {0};
    PyObject *ret = NULL;
    chimera_tune_result *res = PyMem_Calloc(1, sizeof *res);
    if (!res)
        return PyErr_NoMemory();
    if (make_queries(q_obj, ql_obj, &q) == 0 &&
        get_buffer(t_obj, &truth, "truth", KIND_I64, 2, 0) == 0) {
        if (truth.shape[0] != chimera_queries_count(q) || truth.shape[1] < (Py_ssize_t)k) {
            PyErr_Format(PyExc_ValueError, "truth: shape (%lld, %lld) for %lld queries and k=%u",
                         (long long)truth.shape[0], (long long)truth.shape[1],
                         (long long)chimera_queries_count(q), k);
        } else if (index_live(self) == 0) { /* again: make_queries let other threads run */
            chimera_error err = {0};
            chimera_status st;
            self->busy++;
            Py_BEGIN_ALLOW_THREADS
            st = heldout > 0
                     ? chimera_index_tune_heldout(self->index, q, truth.buf,
                                                  (uint32_t)truth.shape[1], k, target, heldout,
                                                  seed, &so, res, &err)
                     : chimera_index_tune(self->index, q, truth.buf, (uint32_t)truth.shape[1], k,
                                          target, &so, res, &err);
            Py_END_ALLOW_THREADS
            self->busy--;
            if (st != CHIMERA_OK) {
                raise_status(st, &err);
            } else {
                PyObject *points = PyList_New(0);
                for (int i = 0; points && i < res->n_points && i < 96; i++) {
                    PyObject *pt = Py_BuildValue("{s:N,s:d,s:d}", "params",
                                                 params_to_dict(&res->points[i].params), "recall",
                                                 res->points[i].recall, "qps", res->points[i].qps);
                    if (!pt || PyList_Append(points, pt))
                        Py_CLEAR(points);
                    Py_XDECREF(pt);
                }
                /* The raw result travels with the dict so that save_profile can store it. */
                PyObject *raw = points ? PyBytes_FromStringAndSize((const char *)res, sizeof *res)
                                       : NULL;
                if (raw)
                    ret = Py_BuildValue("{s:N,s:d,s:d,s:O,s:N,s:N}", "params",
                                        params_to_dict(&res->best), "recall", res->recall, "qps",
                                        res->qps, "reached", res->reached ? Py_True : Py_False,
                                        "points", points, "_raw", raw);
                else
                    Py_XDECREF(points);
                /* the held-out check: recall on queries the tuning never saw, with its
                 * 95% interval */
                PyObject *ho = ret && heldout > 0
                    ? Py_BuildValue("{s:L,s:L,s:d,s:d,s:d,s:L,s:d}", "n_tune",
                                    (long long)res->n_tune, "n_heldout", (long long)res->n_heldout,
                                    "recall", res->heldout_recall, "low", res->heldout_low, "high",
                                    res->heldout_high, "need", (long long)res->heldout_need,
                                    "tune_target", res->tune_target)
                    : NULL;
                if (ret && heldout > 0 && (!ho || PyDict_SetItemString(ret, "heldout", ho)))
                    Py_CLEAR(ret); /* an exception is set: no result with it */
                Py_XDECREF(ho);
            }
        }
    }
    chimera_queries_free(q);
    release(&truth);
    PyMem_Free(res);
    return ret;
}

static PyObject *Index_check(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (index_live(self))
        return NULL;
    chimera_error err = {0};
    chimera_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = chimera_index_check(self->index, &err);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (st != CHIMERA_OK)
        return raise_status(st, &err);
    Py_RETURN_NONE;
}

/* The setting a search with this k and no parameters uses (chimera_index_params_default;
 * with filtered, the deeper one of a query with a filter: chimera_index_params_resolve):
 * a dict of n_probe, k_refine, k_fullbit, chunks and whether they are the index's
 * calibrated ones. */
static PyObject *Index_params_default(IndexObject *self, PyObject *args)
{
    unsigned long k;
    int filtered = 0;
    if (!PyArg_ParseTuple(args, "k|p", &k, &filtered) || index_live(self))
        return NULL;
    if (k == 0 || k > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "k must be at least 1");
        return NULL;
    }
    chimera_search_params p = {0};
    int cal = chimera_index_params_default(self->index, (uint32_t)k, &p);
    if (filtered) {
        chimera_error err = {0};
        chimera_status st = chimera_index_params_resolve(self->index, (uint32_t)k, NULL, 1, &p, &err);
        if (st != CHIMERA_OK)
            return raise_status(st, &err);
    }
    return Py_BuildValue("{s:I,s:I,s:I,s:I,s:O}", "n_probe", p.n_probe, "k_refine", p.k_refine,
                         "k_fullbit", p.k_fullbit, "chunks", p.chunks, "calibrated",
                         cal ? Py_True : Py_False);
}

/* Moves the handle to the newest committed generation. The library allows it while
 * other threads search (they finish on the generation they started with); counted as a
 * call in flight so that close() refuses meanwhile. Returns True when the handle moved. */
static PyObject *Index_refresh(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (index_live(self))
        return NULL;
    chimera_error err = {0};
    chimera_status st;
    int changed = 0;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = chimera_index_refresh(self->index, &changed, &err);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (st != CHIMERA_OK)
        return raise_status(st, &err);
    return PyBool_FromLong(changed);
}

/* Fills the writable int64 array `out` with the first len(out) ids a search can return
 * and returns how many there are in all: the caller sizes `out` from n_docs and calls
 * again with the returned count when a refresh in between made it differ. */
static PyObject *Index_ids(IndexObject *self, PyObject *out_obj)
{
    if (index_live(self))
        return NULL;
    Py_buffer out = {0};
    if (get_buffer(out_obj, &out, "out", KIND_I64, 1, 1))
        return NULL;
    int64_t n;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    n = chimera_index_ids(self->index, out.buf, out.shape[0]);
    Py_END_ALLOW_THREADS
    self->busy--;
    release(&out);
    return PyLong_FromLongLong(n);
}

static PyObject *Index_get_generation(IndexObject *self, void *unused)
{
    (void)unused;
    if (index_live(self))
        return NULL;
    return PyLong_FromUnsignedLongLong(chimera_index_generation(self->index));
}

static PyObject *Index_get_n_docs(IndexObject *self, void *unused)
{
    (void)unused;
    if (index_live(self))
        return NULL;
    return PyLong_FromLongLong(chimera_index_n_docs(self->index));
}

static PyObject *Index_get_dim(IndexObject *self, void *unused)
{
    (void)unused;
    if (index_live(self))
        return NULL;
    return PyLong_FromUnsignedLong(chimera_index_dim(self->index));
}

static PyObject *Index_get_backend(IndexObject *self, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(chimera_backend_name(self->backend));
}

static PyObject *Index_get_closed(IndexObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->index == NULL);
}

/* Stores a tune result (the bytes Index.tune returned as "_raw") as the profile of
 * (k, target) in the index at path. */
static PyObject *py_profile_save(PyObject *self, PyObject *args)
{
    const char *path;
    long long k_ll;
    double target;
    Py_buffer raw = {0};
    uint32_t k;
    (void)self;
    if (!PyArg_ParseTuple(args, "sLdy*", &path, &k_ll, &target, &raw))
        return NULL;
    PyObject *ret = NULL;
    if (to_u32(k_ll, "k", &k) == 0) {
        if (raw.len != (Py_ssize_t)sizeof(chimera_tune_result)) {
            PyErr_SetString(PyExc_ValueError, "not a tune result");
        } else {
            chimera_tune_result res;
            memcpy(&res, raw.buf, sizeof res);
            chimera_error err = {0};
            chimera_status st;
            Py_BEGIN_ALLOW_THREADS
            st = chimera_index_profile_save(path, k, target, &res, &err);
            Py_END_ALLOW_THREADS
            ret = st == CHIMERA_OK ? Py_NewRef(Py_None) : raise_status(st, &err);
        }
    }
    PyBuffer_Release(&raw);
    return ret;
}

static PyMethodDef Index_methods[] = {
    {"search", (PyCFunction)(void (*)(void))Index_search, METH_VARARGS | METH_KEYWORDS,
     "Low-level search; use chimera.Index.search."},
    {"tune", (PyCFunction)(void (*)(void))Index_tune, METH_VARARGS | METH_KEYWORDS,
     "Low-level tune; use chimera.Index.tune."},
    {"check", (PyCFunction)Index_check, METH_NOARGS, "Low-level check."},
    {"refresh", (PyCFunction)Index_refresh, METH_NOARGS, "Low-level refresh."},
    {"ids", (PyCFunction)Index_ids, METH_O, "Low-level ids; use chimera.Index.ids."},
    {"params_default", (PyCFunction)Index_params_default, METH_VARARGS,
     "Low-level; use chimera.Index.default_params."},
    {"close", (PyCFunction)Index_close, METH_NOARGS, "Low-level close."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Index_getset[] = {
    {"n_docs", (getter)Index_get_n_docs, NULL, "documents a search can return", NULL},
    {"generation", (getter)Index_get_generation, NULL, "the generation the handle sees", NULL},
    {"dim", (getter)Index_get_dim, NULL, "token dimension", NULL},
    {"backend", (getter)Index_get_backend, NULL, "backend asked for at open", NULL},
    {"closed", (getter)Index_get_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chimera._chimera.RawIndex",
    .tp_basicsize = sizeof(IndexObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An opened index (low level; chimera.Index wraps it).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Index_init,
    .tp_dealloc = (destructor)Index_dealloc,
    .tp_methods = Index_methods,
    .tp_getset = Index_getset,
};

/* ---------------------------------------------------------------------------------- */
/* Module                                                                             */
/* ---------------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"build", (PyCFunction)(void (*)(void))py_build, METH_VARARGS | METH_KEYWORDS,
     "Low-level build; use chimera.Index.build."},
    {"exact_search", (PyCFunction)(void (*)(void))py_exact_search, METH_VARARGS | METH_KEYWORDS,
     "Low-level exact search; use chimera.exact_search."},
    {"recall", py_recall, METH_VARARGS, "Low-level recall; use chimera.recall."},
    {"add", (PyCFunction)(void (*)(void))py_add, METH_VARARGS | METH_KEYWORDS,
     "Low-level add; use chimera.add."},
    {"update", (PyCFunction)(void (*)(void))py_update, METH_VARARGS | METH_KEYWORDS,
     "Low-level update; use chimera.update."},
    {"delete", (PyCFunction)(void (*)(void))py_delete, METH_VARARGS | METH_KEYWORDS,
     "Low-level delete; use chimera.delete."},
    {"compact", (PyCFunction)(void (*)(void))py_compact, METH_VARARGS | METH_KEYWORDS,
     "Low-level compact; use chimera.compact."},
    {"meta_import", (PyCFunction)(void (*)(void))py_meta_import, METH_VARARGS | METH_KEYWORDS,
     "Low-level metadata import; use chimera.meta_import."},
    {"info", py_info, METH_VARARGS, "The manifest of the index at path, as a dict."},
    {"runtime_info", py_runtime_info, METH_NOARGS, "This build and machine, as a dict."},
    {"profile_save", py_profile_save, METH_VARARGS, "Low-level profile save."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "chimera._chimera", "The C extension behind chimera.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__chimera(void)
{
    if (PyType_Ready(&IndexType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    ChimeraError = PyErr_NewExceptionWithDoc(
        "chimera.ChimeraError", "An error reported by the Chimera library.", PyExc_RuntimeError,
        NULL);
    CorruptIndexError = ChimeraError ? PyErr_NewExceptionWithDoc(
                                           "chimera.CorruptIndexError",
                                           "An index failed validation, a checksum, or has an "
                                           "unsupported format version.",
                                           ChimeraError, NULL)
                                     : NULL;
    if (!CorruptIndexError || PyModule_AddObjectRef(m, "ChimeraError", ChimeraError) ||
        PyModule_AddObjectRef(m, "CorruptIndexError", CorruptIndexError) ||
        PyModule_AddObjectRef(m, "RawIndex", (PyObject *)&IndexType) ||
        PyModule_AddStringConstant(m, "version", chimera_version())) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
