/* A fake CUDA driver (libcuda.so.1) for tests on machines without a GPU.
 *
 * - Devices: FAKE_CUDA_DEVICES (default 2); FAKE_CUDA_INIT_FAIL=1 makes cuInit fail (no device).
 * - Device memory: cuMemAlloc_v2 reserves an inaccessible (PROT_NONE) address range, so any direct
 *   host access to a "device pointer" crashes the test, and keeps the bytes in a separate backing
 *   allocation that only the copy functions reach. cuPointerGetAttribute answers from that table.
 * - Pinned host memory (cuMemHostAlloc) is ordinary memory, reported as host memory.
 * - Streams: every stream (and the legacy stream 0) is a queue run in order by its own worker
 *   thread: async copies, host functions, 32-bit wait/write values and event records.
 * - CUDA calls made from inside a host function are refused (CUDA_ERROR_NOT_PERMITTED) and
 *   counted (fake_cuda_violations), as the real driver forbids them.
 * - Failure injection: fake_cuda_fail(name, skip, count) makes `name` fail with
 *   CUDA_ERROR_UNKNOWN after `skip` successful calls, `count` times (-1 = forever); env
 *   FAKE_CUDA_FAIL=name:skip:count does the same at load. FAKE_CUDA_NO_WAIT_VALUE=1 makes
 *   cuStreamWaitValue32* return CUDA_ERROR_NOT_SUPPORTED.
 * - fake_cuda_calls(name) counts successful calls of one entry point; fake_cuda_reset() clears
 *   counters and injected failures.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct fctx *CUcontext;
typedef struct fstream *CUstream;
typedef struct fevent *CUevent;
typedef void (*CUhostFn)(void *);

enum {
    OK = 0,
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_INVALID_CONTEXT = 201,
    E_INVALID_HANDLE = 400,
    E_NOT_READY = 600,
    E_NOT_PERMITTED = 800,
    E_NOT_SUPPORTED = 801,
    E_UNKNOWN = 999,
};

#define MAXDEV 8
#define MAXALLOC 4096
#define MAXNAMES 128

struct fctx {
    int dev;
};
static struct fctx g_ctx[MAXDEV];
static int g_ndev = 2;
static int g_inited = 0;
static int g_no_wait_value = 0;
static __thread CUcontext t_current = NULL;
static __thread int t_in_hostfn = 0;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- call counting and failure injection ---- */
struct counter {
    char name[64];
    long calls;
    long fail_skip;
    long fail_count; /* 0 = none, -1 = forever */
};
static struct counter g_counters[MAXNAMES];
static int g_ncounters = 0;
static long g_violations = 0;

static struct counter *counter_for(const char *name) {
    for (int i = 0; i < g_ncounters; i++)
        if (strcmp(g_counters[i].name, name) == 0) return &g_counters[i];
    if (g_ncounters == MAXNAMES) return NULL;
    struct counter *c = &g_counters[g_ncounters++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

/* Returns an error to report, or OK to go on. */
static CUresult enter(const char *name) {
    pthread_mutex_lock(&g_lock);
    CUresult r = OK;
    if (t_in_hostfn) {
        g_violations++;
        r = E_NOT_PERMITTED;
    } else {
        struct counter *c = counter_for(name);
        if (c) {
            if (c->fail_count != 0 && c->fail_skip == 0) {
                if (c->fail_count > 0) c->fail_count--;
                r = E_UNKNOWN;
            } else {
                if (c->fail_count != 0) c->fail_skip--;
                c->calls++;
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}
#define ENTER(name)                   \
    do {                              \
        CUresult e_ = enter(name);    \
        if (e_ != OK) return e_;      \
    } while (0)

void fake_cuda_fail(const char *name, long skip, long count) {
    pthread_mutex_lock(&g_lock);
    struct counter *c = counter_for(name);
    if (c) {
        c->fail_skip = skip;
        c->fail_count = count;
    }
    pthread_mutex_unlock(&g_lock);
}

long fake_cuda_calls(const char *name) {
    pthread_mutex_lock(&g_lock);
    struct counter *c = counter_for(name);
    long n = c ? c->calls : 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}

long fake_cuda_violations(void) {
    pthread_mutex_lock(&g_lock);
    long n = g_violations;
    pthread_mutex_unlock(&g_lock);
    return n;
}

void fake_cuda_reset(void) {
    pthread_mutex_lock(&g_lock);
    g_ncounters = 0;
    g_violations = 0;
    pthread_mutex_unlock(&g_lock);
}

void fake_cuda_set_wait_value(int supported) {
    g_no_wait_value = !supported;
}

__attribute__((constructor)) static void fake_init(void) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    if (n) {
        g_ndev = atoi(n);
        if (g_ndev < 0) g_ndev = 0;
        if (g_ndev > MAXDEV) g_ndev = MAXDEV;
    }
    for (int i = 0; i < MAXDEV; i++) g_ctx[i].dev = i;
    const char *w = getenv("FAKE_CUDA_NO_WAIT_VALUE");
    g_no_wait_value = w && *w == '1';
    const char *f = getenv("FAKE_CUDA_FAIL");
    if (f && *f) {
        char name[64];
        long skip = 0, count = -1;
        if (sscanf(f, "%63[^:]:%ld:%ld", name, &skip, &count) >= 1) fake_cuda_fail(name, skip, count);
    }
}

/* ---- device allocations ---- */
struct alloc {
    uint64_t dptr;
    size_t size;
    size_t reserved;
    char *backing;
    int dev;
    int host; /* pinned host allocation (cuMemHostAlloc) */
};
static struct alloc g_allocs[MAXALLOC];

static struct alloc *find_alloc(uint64_t p) {
    for (int i = 0; i < MAXALLOC; i++) {
        struct alloc *a = &g_allocs[i];
        if (a->dptr && p >= a->dptr && p < a->dptr + a->size) return a;
    }
    return NULL;
}

/* Resolves [p, p+n) to addressable bytes: device ranges to their backing store, anything else
 * (host memory) as is. want_dev: 1 = must be device, 0 = must be host, -1 = either. */
static CUresult resolve(uint64_t p, size_t n, int want_dev, char **out) {
    pthread_mutex_lock(&g_lock);
    struct alloc *a = find_alloc(p);
    CUresult r = OK;
    if (a && !a->host) {
        if (want_dev == 0 || p + n > a->dptr + a->size) r = E_INVALID_VALUE;
        else *out = a->backing + (p - a->dptr);
    } else {
        if (want_dev == 1 || p == 0) r = E_INVALID_VALUE;
        else *out = (char *)(uintptr_t)p;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---- streams ---- */
enum { OP_COPY, OP_HOSTFN, OP_WAIT32, OP_WRITE32, OP_EVENT };
struct op {
    int kind;
    char *dst, *src;
    size_t n;
    CUhostFn fn;
    void *ud;
    volatile uint32_t *addr;
    uint32_t value;
    unsigned flags;
    CUevent ev;
    uint64_t seq;
    struct op *next;
};
struct fstream {
    pthread_mutex_t m;
    pthread_cond_t cv;
    struct op *head, *tail;
    int busy;
    int stop;
    CUcontext ctx;
    pthread_t th;
};
struct fevent {
    pthread_mutex_t m;
    pthread_cond_t cv;
    uint64_t recorded, done;
};

static int wait_ok(uint32_t cur, uint32_t v, unsigned flags) {
    switch (flags & 3) {
    case 0: return (int32_t)(cur - v) >= 0; /* GEQ */
    case 1: return cur == v;                /* EQ */
    case 2: return (cur & v) != 0;          /* AND */
    default: return ~(cur | v) != 0;        /* NOR */
    }
}

static void *stream_main(void *arg) {
    struct fstream *s = arg;
    pthread_mutex_lock(&s->m);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->m);
        if (!s->head) break;
        struct op *o = s->head;
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->busy = 1;
        pthread_mutex_unlock(&s->m);
        switch (o->kind) {
        case OP_COPY: memmove(o->dst, o->src, o->n); break;
        case OP_HOSTFN:
            t_in_hostfn = 1;
            o->fn(o->ud);
            t_in_hostfn = 0;
            break;
        case OP_WAIT32:
            while (!wait_ok(__atomic_load_n(o->addr, __ATOMIC_ACQUIRE), o->value, o->flags)) usleep(20);
            break;
        case OP_WRITE32: __atomic_store_n(o->addr, o->value, __ATOMIC_RELEASE); break;
        case OP_EVENT:
            pthread_mutex_lock(&o->ev->m);
            if (o->seq > o->ev->done) o->ev->done = o->seq;
            pthread_cond_broadcast(&o->ev->cv);
            pthread_mutex_unlock(&o->ev->m);
            break;
        }
        free(o);
        pthread_mutex_lock(&s->m);
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->m);
    return NULL;
}

static struct fstream *stream_new(CUcontext ctx) {
    struct fstream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->ctx = ctx;
    if (pthread_create(&s->th, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

static struct fstream *g_legacy = NULL;
static pthread_once_t g_legacy_once = PTHREAD_ONCE_INIT;
static void legacy_init(void) { g_legacy = stream_new(&g_ctx[0]); }
static struct fstream *stream_of(CUstream s) {
    if (s) return s;
    pthread_once(&g_legacy_once, legacy_init);
    return g_legacy;
}

static CUresult push(CUstream hs, struct op *o) {
    struct fstream *s = stream_of(hs);
    if (!s) {
        free(o);
        return E_INVALID_HANDLE;
    }
    o->next = NULL;
    pthread_mutex_lock(&s->m);
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->m);
    return OK;
}

static struct op *op_new(int kind) {
    struct op *o = calloc(1, sizeof *o);
    if (o) o->kind = kind;
    return o;
}

/* ---- the driver API ---- */
CUresult cuInit(unsigned flags) {
    (void)flags;
    ENTER("cuInit");
    const char *f = getenv("FAKE_CUDA_INIT_FAIL");
    if (f && *f == '1') return E_NO_DEVICE;
    g_inited = 1;
    return OK;
}

CUresult cuDriverGetVersion(int *v) {
    ENTER("cuDriverGetVersion");
    if (!v) return E_INVALID_VALUE;
    *v = 12040;
    return OK;
}

CUresult cuDeviceGetCount(int *n) {
    ENTER("cuDeviceGetCount");
    if (!g_inited) return E_NOT_INITIALIZED;
    if (!n) return E_INVALID_VALUE;
    *n = g_ndev;
    return OK;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    ENTER("cuDeviceGet");
    if (!d) return E_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= g_ndev) return E_INVALID_DEVICE;
    *d = ordinal;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    ENTER("cuDevicePrimaryCtxRetain");
    if (!c) return E_INVALID_VALUE;
    if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
    *c = &g_ctx[d];
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    ENTER("cuDevicePrimaryCtxRelease_v2");
    return (d < 0 || d >= g_ndev) ? E_INVALID_DEVICE : OK;
}

CUresult cuCtxSetCurrent(CUcontext c) {
    ENTER("cuCtxSetCurrent");
    t_current = c;
    return OK;
}

CUresult cuCtxGetCurrent(CUcontext *c) {
    ENTER("cuCtxGetCurrent");
    if (!c) return E_INVALID_VALUE;
    *c = t_current;
    return OK;
}

static __thread CUcontext t_stack[16];
static __thread int t_depth = 0;
CUresult cuCtxPushCurrent_v2(CUcontext c) {
    ENTER("cuCtxPushCurrent_v2");
    if (t_depth == 16) return E_UNKNOWN;
    t_stack[t_depth++] = t_current;
    t_current = c;
    return OK;
}

CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    ENTER("cuCtxPopCurrent_v2");
    if (t_depth == 0) return E_INVALID_CONTEXT;
    if (c) *c = t_current;
    t_current = t_stack[--t_depth];
    return OK;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    if (!s) return E_INVALID_VALUE;
    switch (e) {
    case OK: *s = "no error"; break;
    case E_INVALID_VALUE: *s = "invalid argument"; break;
    case E_NOT_PERMITTED: *s = "operation not permitted (fake: CUDA call inside a host function)"; break;
    case E_NOT_SUPPORTED: *s = "operation not supported"; break;
    case E_NO_DEVICE: *s = "no CUDA-capable device is detected"; break;
    case E_UNKNOWN: *s = "unknown error (fake: injected failure)"; break;
    default: *s = "fake CUDA error"; break;
    }
    return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    ENTER("cuMemAlloc_v2");
    if (!p || n == 0) return E_INVALID_VALUE;
    if (!t_current) return E_INVALID_CONTEXT;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t reserved = (n + page - 1) / page * page;
    void *addr = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (addr == MAP_FAILED) return E_OUT_OF_MEMORY;
    char *backing = malloc(n);
    if (!backing) {
        munmap(addr, reserved);
        return E_OUT_OF_MEMORY;
    }
    memset(backing, 0, n);
    pthread_mutex_lock(&g_lock);
    CUresult r = E_OUT_OF_MEMORY;
    for (int i = 0; i < MAXALLOC; i++) {
        if (!g_allocs[i].dptr) {
            g_allocs[i] = (struct alloc){(uint64_t)(uintptr_t)addr, n, reserved, backing, t_current->dev, 0};
            *p = (uint64_t)(uintptr_t)addr;
            r = OK;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (r != OK) {
        free(backing);
        munmap(addr, reserved);
    }
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    ENTER("cuMemFree_v2");
    pthread_mutex_lock(&g_lock);
    struct alloc *a = find_alloc(p);
    CUresult r = E_INVALID_VALUE;
    if (a && !a->host && a->dptr == p) {
        munmap((void *)(uintptr_t)a->dptr, a->reserved);
        free(a->backing);
        memset(a, 0, sizeof *a);
        r = OK;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    ENTER("cuMemHostAlloc");
    if (!p || n == 0) return E_INVALID_VALUE;
    void *m = NULL;
    if (posix_memalign(&m, 4096, n) != 0) return E_OUT_OF_MEMORY;
    memset(m, 0, n);
    pthread_mutex_lock(&g_lock);
    CUresult r = E_OUT_OF_MEMORY;
    for (int i = 0; i < MAXALLOC; i++) {
        if (!g_allocs[i].dptr) {
            g_allocs[i] = (struct alloc){(uint64_t)(uintptr_t)m, n, n, m, t_current ? t_current->dev : 0, 1};
            r = OK;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (r != OK) free(m);
    else *p = m;
    return r;
}

CUresult cuMemFreeHost(void *p) {
    ENTER("cuMemFreeHost");
    pthread_mutex_lock(&g_lock);
    struct alloc *a = find_alloc((uint64_t)(uintptr_t)p);
    CUresult r = E_INVALID_VALUE;
    if (a && a->host && a->dptr == (uint64_t)(uintptr_t)p) {
        free(a->backing);
        memset(a, 0, sizeof *a);
        r = OK;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    (void)flags;
    ENTER("cuMemHostGetDevicePointer_v2");
    if (!d || !p) return E_INVALID_VALUE;
    *d = (uint64_t)(uintptr_t)p; /* unified addressing */
    return OK;
}

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    ENTER("cuPointerGetAttribute");
    if (!data) return E_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = find_alloc(p);
    struct alloc copy = a ? *a : (struct alloc){0};
    pthread_mutex_unlock(&g_lock);
    if (!a) return E_INVALID_VALUE; /* memory unknown to CUDA */
    switch (attr) {
    case 2: *(unsigned *)data = copy.host ? 1 : 2; return OK; /* MEMORY_TYPE */
    case 9: *(int *)data = copy.dev; return OK;              /* DEVICE_ORDINAL */
    default: return E_INVALID_VALUE;
    }
}

static CUresult copy_sync(uint64_t dst, int dst_dev, uint64_t src, int src_dev, size_t n) {
    char *d, *s;
    CUresult r = resolve(dst, n, dst_dev, &d);
    if (r == OK) r = resolve(src, n, src_dev, &s);
    if (r == OK) memmove(d, s, n);
    return r;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER("cuMemcpy");
    return copy_sync(dst, -1, src, -1, n);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    ENTER("cuMemcpyHtoD_v2");
    return copy_sync(dst, 1, (uint64_t)(uintptr_t)src, 0, n);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    ENTER("cuMemcpyDtoH_v2");
    return copy_sync((uint64_t)(uintptr_t)dst, 0, src, 1, n);
}

static CUresult copy_async(uint64_t dst, int dst_dev, uint64_t src, int src_dev, size_t n, CUstream s) {
    char *d, *sp;
    CUresult r = resolve(dst, n, dst_dev, &d);
    if (r == OK) r = resolve(src, n, src_dev, &sp);
    if (r != OK) return r;
    struct op *o = op_new(OP_COPY);
    if (!o) return E_OUT_OF_MEMORY;
    o->dst = d;
    o->src = sp;
    o->n = n;
    return push(s, o);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    ENTER("cuMemcpyAsync");
    return copy_async(dst, -1, src, -1, n, s);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    ENTER("cuMemcpyHtoDAsync_v2");
    return copy_async(dst, 1, (uint64_t)(uintptr_t)src, 0, n, s);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    ENTER("cuMemcpyDtoHAsync_v2");
    return copy_async((uint64_t)(uintptr_t)dst, 0, src, 1, n, s);
}

CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    (void)flags;
    ENTER("cuStreamCreate");
    if (!s) return E_INVALID_VALUE;
    if (!t_current) return E_INVALID_CONTEXT;
    struct fstream *st = stream_new(t_current);
    if (!st) return E_OUT_OF_MEMORY;
    *s = st;
    return OK;
}

static void stream_drain(struct fstream *s) {
    pthread_mutex_lock(&s->m);
    while (s->head || s->busy) pthread_cond_wait(&s->cv, &s->m);
    pthread_mutex_unlock(&s->m);
}

CUresult cuStreamSynchronize(CUstream hs) {
    ENTER("cuStreamSynchronize");
    struct fstream *s = stream_of(hs);
    if (!s) return E_INVALID_HANDLE;
    stream_drain(s);
    return OK;
}

CUresult cuStreamDestroy_v2(CUstream s) {
    ENTER("cuStreamDestroy_v2");
    if (!s) return E_INVALID_HANDLE;
    stream_drain(s);
    pthread_mutex_lock(&s->m);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->m);
    pthread_join(s->th, NULL);
    free(s);
    return OK;
}

CUresult cuStreamGetCtx(CUstream hs, CUcontext *c) {
    ENTER("cuStreamGetCtx");
    if (!c) return E_INVALID_VALUE;
    if (!hs) {
        if (!t_current) return E_INVALID_CONTEXT;
        *c = t_current;
        return OK;
    }
    *c = hs->ctx;
    return OK;
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *ud) {
    ENTER("cuLaunchHostFunc");
    if (!fn) return E_INVALID_VALUE;
    struct op *o = op_new(OP_HOSTFN);
    if (!o) return E_OUT_OF_MEMORY;
    o->fn = fn;
    o->ud = ud;
    return push(s, o);
}

static CUresult wait_value(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
    if (g_no_wait_value) return E_NOT_SUPPORTED;
    char *p;
    CUresult r = resolve(addr, 4, 0, &p);
    if (r != OK) return r;
    struct op *o = op_new(OP_WAIT32);
    if (!o) return E_OUT_OF_MEMORY;
    o->addr = (volatile uint32_t *)p;
    o->value = v;
    o->flags = flags;
    return push(s, o);
}

CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
    ENTER("cuStreamWaitValue32_v2");
    return wait_value(s, addr, v, flags);
}

CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
    ENTER("cuStreamWaitValue32");
    return wait_value(s, addr, v, flags);
}

CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
    (void)flags;
    ENTER("cuStreamWriteValue32_v2");
    char *p;
    CUresult r = resolve(addr, 4, 0, &p);
    if (r != OK) return r;
    struct op *o = op_new(OP_WRITE32);
    if (!o) return E_OUT_OF_MEMORY;
    o->addr = (volatile uint32_t *)p;
    o->value = v;
    return push(s, o);
}

CUresult cuEventCreate(CUevent *e, unsigned flags) {
    (void)flags;
    ENTER("cuEventCreate");
    if (!e) return E_INVALID_VALUE;
    struct fevent *ev = calloc(1, sizeof *ev);
    if (!ev) return E_OUT_OF_MEMORY;
    pthread_mutex_init(&ev->m, NULL);
    pthread_cond_init(&ev->cv, NULL);
    *e = ev;
    return OK;
}

CUresult cuEventRecord(CUevent e, CUstream s) {
    ENTER("cuEventRecord");
    if (!e) return E_INVALID_HANDLE;
    struct op *o = op_new(OP_EVENT);
    if (!o) return E_OUT_OF_MEMORY;
    pthread_mutex_lock(&e->m);
    o->seq = ++e->recorded;
    pthread_mutex_unlock(&e->m);
    o->ev = e;
    return push(s, o);
}

CUresult cuEventSynchronize(CUevent e) {
    ENTER("cuEventSynchronize");
    if (!e) return E_INVALID_HANDLE;
    pthread_mutex_lock(&e->m);
    uint64_t want = e->recorded;
    while (e->done < want) pthread_cond_wait(&e->cv, &e->m);
    pthread_mutex_unlock(&e->m);
    return OK;
}

CUresult cuEventQuery(CUevent e) {
    ENTER("cuEventQuery");
    if (!e) return E_INVALID_HANDLE;
    pthread_mutex_lock(&e->m);
    int done = e->done >= e->recorded;
    pthread_mutex_unlock(&e->m);
    return done ? OK : E_NOT_READY;
}

CUresult cuEventDestroy_v2(CUevent e) {
    ENTER("cuEventDestroy_v2");
    if (!e) return E_INVALID_HANDLE;
    cuEventSynchronize(e);
    free(e);
    return OK;
}
