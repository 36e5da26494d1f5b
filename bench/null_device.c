/* A null device: the CUDA driver, NCCL and NVRTC calls gpuwire makes, answered on the CPU, so the
 * host side of gpuwire's device paths can be profiled on a machine without a GPU (callgrind,
 * perf, a wall clock). It is a measuring instrument, not a GPU emulator:
 *
 * - "Device" memory (cuMemAlloc) and pinned memory (cuMemHostAlloc, cuMemAllocHost,
 *   cuMemHostRegister) are ordinary host memory that the library remembers, so that
 *   cuPointerGetAttribute classifies pointers as the driver does (unknown memory:
 *   CUDA_ERROR_INVALID_VALUE).
 * - Streams: by default synchronous (a copy or a memset happens in the call, events are
 *   complete when recorded, cuStreamWriteValue32 writes at once, a cuStreamWaitValue32 whose
 *   word is not reached yet fails with CUDA_ERROR_NOT_SUPPORTED): what instruction counts want.
 *   NULLDEV_STREAMS=async: each stream is a worker thread running its operations in order, so
 *   the stream-ordered MPI paths (MPI_STAGED, MPI_CUDA_AWARE) run (scripts/null-device.sh tests).
 * - Kernels run as C loops on the stream, by name: gpuwire's reductions, AVG divisions, fused
 *   sums and view packing (src/device/kernels.rs), the distributed arrays' fill, axpy, scale and
 *   reductions in the GPU's order of operations (src/device/array_kernels.rs), and the GPU
 *   tests' spin, fill and scale kernels. Any other kernel does nothing and warns, or fails to
 *   launch with NULLDEV_KERNELS=fail.
 * - NCCL for one rank: collectives copy their input on their stream (a reduction over one
 *   rank), sends to oneself are matched with receives in order at the outermost ncclGroupEnd (or
 *   at once outside a group), per communicator; one left unmatched fails the group's end (a
 *   real NCCL would hang). A call on a communicator that another thread's open group has
 *   operations on, or that another thread is in a call on, fails with ncclInvalidUsage (NCCL's
 *   communicators are not thread-safe: its group's operations are in the communicator's plan
 *   from their calls, and another thread's group end would launch them apart). A nonblocking
 *   communicator answers ncclInProgress as NCCL does, and a call on it before its state was
 *   polled back to ncclSuccess (ncclCommGetAsyncError) fails with ncclInvalidUsage. More
 *   ranks: ncclCommInitRank fails. Not modelled: groups that defer collectives.
 * - CUDA IPC: with NULLDEV_IPC=1 device memory is pages of one shared memfd per process, and a
 *   handle lets another process map them (/proc/PID/fd/FD); else "not supported". Peer access
 *   between devices: never. CUDA graphs (stream capture): not there.
 *
 * One device (NULLDEV_DEVICES=N for more), compute capability 9.0, driver 12.8, NCCL 2.23.4.
 *
 * Build and use (scripts/null-device.sh does both):
 *   cc -O2 -shared -fPIC -o .nulldev/libcuda.so bench/null_device.c -lpthread -lm
 *   for l in libcuda.so.1 libnccl.so libnccl.so.2 libnvrtc.so; do ln -sf libcuda.so .nulldev/$l; done
 *   LD_LIBRARY_PATH=$PWD/.nulldev mpirun -np 1 target/release/gpuwire-bench device --backend nccl
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_READY = 600,
};
enum { MEM_HOST = 1, MEM_DEVICE = 2 };
enum { KIND_DEVICE, KIND_MANAGED, KIND_PINNED, KIND_REGISTERED, KIND_ARENA, KIND_MAPPED };

/* ---- memory the driver knows ---- */

struct range {
    uintptr_t start;
    size_t bytes;
    int kind;
    int device; /* of the context current at the allocation */
    unsigned long long id;
};

static int current_device(void);

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;
static size_t n_ranges, cap_ranges;
static unsigned long long next_id = 1;

static void remember(void *p, size_t bytes, int kind) {
    pthread_mutex_lock(&mem_lock);
    if (n_ranges == cap_ranges) {
        cap_ranges = cap_ranges ? 2 * cap_ranges : 256;
        ranges = realloc(ranges, cap_ranges * sizeof *ranges);
        if (!ranges)
            abort();
    }
    ranges[n_ranges++] = (struct range){(uintptr_t)p, bytes ? bytes : 1, kind, current_device(), next_id++};
    pthread_mutex_unlock(&mem_lock);
}

/* The kind of the range that starts at `p`, now forgotten; -1 if none does. */
static int forget(void *p) {
    int kind = -1;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i].start == (uintptr_t)p) {
            kind = ranges[i].kind;
            ranges[i] = ranges[--n_ranges];
            break;
        }
    pthread_mutex_unlock(&mem_lock);
    return kind;
}

static int lookup(uintptr_t p, struct range *out) {
    int found = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < n_ranges; i++)
        if (p >= ranges[i].start && p - ranges[i].start < ranges[i].bytes) {
            *out = ranges[i];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&mem_lock);
    return found;
}

/* Device memory that other processes can map (NULLDEV_IPC=1: CUDA IPC): allocations are pages of
 * one sparse memfd per process, never reused (a free punches a hole); a handle names the
 * process, the memfd and the range, and a peer maps it through /proc/PID/fd/FD. */
#define ARENA_BYTES ((size_t)1 << 40)
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static int arena_fd = -1;
static char *arena_base;
static size_t arena_used;

/* Whether environment variable `name` is `on`, read once into `*cache` (-1 before). */
static int env_is(const char *name, const char *on, int *cache) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && !strcmp(e, on);
    }
    return *cache;
}

static int ipc_mode(void) {
    static int mode = -1;
    return env_is("NULLDEV_IPC", "1", &mode);
}

static size_t pages(size_t bytes) { return ((bytes ? bytes : 1) + 4095) & ~(size_t)4095; }

static void *arena_alloc(size_t bytes) {
    size_t len = pages(bytes);
    void *p = NULL;
    pthread_mutex_lock(&arena_lock);
    if (arena_fd < 0) {
        arena_fd = memfd_create("nulldev-device", MFD_CLOEXEC);
        if (arena_fd >= 0 && ftruncate(arena_fd, (off_t)ARENA_BYTES) == 0) {
            void *m = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, arena_fd, 0);
            arena_base = m == MAP_FAILED ? NULL : m;
        }
    }
    if (arena_base && arena_used + len <= ARENA_BYTES) {
        p = arena_base + arena_used;
        arena_used += len;
    }
    pthread_mutex_unlock(&arena_lock);
    if (p)
        remember(p, bytes, KIND_ARENA);
    return p;
}

static void *alloc_kind(size_t bytes, int kind) {
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? bytes : 1))
        return NULL;
    remember(p, bytes, kind);
    return p;
}

static int devices(void) {
    const char *e = getenv("NULLDEV_DEVICES");
    int n = e ? atoi(e) : 1;
    return n < 0 ? 0 : n;
}

/* ---- driver: initialisation, devices, contexts ---- */

CUresult cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *n) { *n = devices(); return CUDA_SUCCESS; }
CUresult cuDeviceGet(int *dev, int ordinal) {
    if (ordinal < 0 || ordinal >= devices())
        return CUDA_ERROR_INVALID_VALUE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    (void)dev;
    switch (attr) {
    case 75: *v = 9; break; /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break; /* COMPUTE_CAPABILITY_MINOR */
    case 16: *v = 132; break; /* MULTIPROCESSOR_COUNT */
    case 1: *v = 1024; break; /* MAX_THREADS_PER_BLOCK */
    case 10: *v = 32; break; /* WARP_SIZE */
    default: *v = 1;
    }
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
    (void)dev;
    snprintf(name, (size_t)len, "null device (bench/null_device.c)");
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev) {
    memset(uuid, 0, 16);
    uuid[0] = 0x4e; /* 'N' */
    uuid[15] = (unsigned char)dev;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev) { return cuDeviceGetUuid(uuid, dev); }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return CUDA_SUCCESS; }
CUresult cuDeviceCanAccessPeer(int *can, int a, int b) { (void)a; (void)b; *can = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetPCIBusId(char *id, int len, int dev) { snprintf(id, (size_t)len, "0000:%02x:00.0", dev); return CUDA_SUCCESS; }

static char contexts[64];
static __thread CUcontext ctx_stack[16];
static __thread int ctx_depth; /* ctx_stack[ctx_depth - 1] is current */

static int ctx_device(CUcontext c) { return (int)((char *)c - contexts); }
static int current_device(void) { return ctx_depth && ctx_stack[ctx_depth - 1] ? ctx_device(ctx_stack[ctx_depth - 1]) : 0; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, int dev) {
    if (dev < 0 || dev >= 64)
        return CUDA_ERROR_INVALID_VALUE;
    *c = &contexts[dev];
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(int dev) { (void)dev; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return CUDA_SUCCESS; }
/* Calls that make something "in the current context" fail without one, as CUDA's do. */
static int no_context(void) { return !ctx_depth || !ctx_stack[ctx_depth - 1]; }
#define CUDA_ERROR_INVALID_CONTEXT 201
CUresult cuCtxGetCurrent(CUcontext *c) { *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) {
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = c;
    if (!c)
        ctx_depth = 0;
    return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent_v2(CUcontext c) {
    if (ctx_depth == 16)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext c) { return cuCtxPushCurrent_v2(c); }
CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext top = ctx_stack[--ctx_depth];
    if (c)
        *c = top;
    return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext *c) { return cuCtxPopCurrent_v2(c); }
CUresult cuCtxGetDevice(int *dev) {
    if (!ctx_depth || !ctx_stack[ctx_depth - 1])
        return CUDA_ERROR_INVALID_VALUE;
    *dev = ctx_device(ctx_stack[ctx_depth - 1]);
    return CUDA_SUCCESS;
}
static void sync_all(void);
CUresult cuCtxSynchronize(void) { sync_all(); return CUDA_SUCCESS; }
CUresult cuCtxGetApiVersion(CUcontext c, unsigned *v) { (void)c; *v = 12080; return CUDA_SUCCESS; }

CUresult cuGetErrorName(CUresult r, const char **s) {
    switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *s = "CUDA_ERROR_UNKNOWN";
    }
    return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
    *s = r == CUDA_ERROR_NOT_SUPPORTED ? "operation not supported by the null device" : "null device error";
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    if (no_context())
        return CUDA_ERROR_INVALID_CONTEXT;
    void *q = ipc_mode() ? arena_alloc(bytes) : alloc_kind(bytes, KIND_DEVICE);
    if (!q)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *p = (CUdeviceptr)(uintptr_t)q;
    return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) { return cuMemAlloc_v2(p, bytes); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags) {
    (void)flags;
    void *q = alloc_kind(bytes, KIND_MANAGED);
    if (!q)
        return 2;
    *p = (CUdeviceptr)(uintptr_t)q;
    return CUDA_SUCCESS;
}
static struct range range_at(uintptr_t p) {
    struct range r = {0};
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i].start == p)
            r = ranges[i];
    pthread_mutex_unlock(&mem_lock);
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    sync_all();
    if (!p)
        return CUDA_SUCCESS;
    struct range r = range_at((uintptr_t)p);
    switch (forget((void *)(uintptr_t)p)) {
    case KIND_ARENA:
        fallocate(arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)((char *)(uintptr_t)p - arena_base), (off_t)pages(r.bytes));
        break;
    case KIND_DEVICE: case KIND_MANAGED: free((void *)(uintptr_t)p); break;
    default: break;
    }
    return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) { return cuMemFree_v2(p); }
CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = alloc_kind(bytes, KIND_PINNED);
    return *p ? CUDA_SUCCESS : 2;
}
CUresult cuMemAllocHost_v2(void **p, size_t bytes) { return cuMemHostAlloc(p, bytes, 0); }
CUresult cuMemAllocHost(void **p, size_t bytes) { return cuMemHostAlloc(p, bytes, 0); }
CUresult cuMemFreeHost(void *p) {
    sync_all();
    if (p && forget(p) == KIND_PINNED)
        free(p);
    return CUDA_SUCCESS;
}
CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags) {
    (void)flags;
    remember(p, bytes, KIND_REGISTERED);
    return CUDA_SUCCESS;
}
CUresult cuMemHostRegister(void *p, size_t bytes, unsigned flags) { return cuMemHostRegister_v2(p, bytes, flags); }
CUresult cuMemHostUnregister(void *p) { return forget(p) >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    (void)flags;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags) { return cuMemHostGetDevicePointer_v2(d, p, flags); }
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *bytes, CUdeviceptr p) {
    struct range r;
    if (!lookup((uintptr_t)p, &r))
        return CUDA_ERROR_INVALID_VALUE;
    if (base)
        *base = r.start;
    if (bytes)
        *bytes = r.bytes;
    return CUDA_SUCCESS;
}
CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *bytes, CUdeviceptr p) { return cuMemGetAddressRange_v2(base, bytes, p); }
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) { *free_b = (size_t)64 << 30; *total = (size_t)80 << 30; return CUDA_SUCCESS; }

CUresult cuPointerGetAttribute(void *out, int attr, CUdeviceptr p) {
    struct range r;
    if (!lookup((uintptr_t)p, &r))
        return CUDA_ERROR_INVALID_VALUE;
    int device = r.kind == KIND_DEVICE || r.kind == KIND_MANAGED || r.kind == KIND_ARENA || r.kind == KIND_MAPPED;
    switch (attr) {
    case 1: *(CUcontext *)out = &contexts[r.device]; break; /* CONTEXT */
    case 2: *(unsigned *)out = device ? MEM_DEVICE : MEM_HOST; break; /* MEMORY_TYPE */
    case 3: case 4: *(void **)out = (void *)(uintptr_t)p; break; /* DEVICE_POINTER, HOST_POINTER */
    case 7: *(unsigned long long *)out = r.id; break; /* BUFFER_ID */
    case 8: *(unsigned *)out = r.kind == KIND_MANAGED; break; /* IS_MANAGED */
    case 9: *(int *)out = r.device; break; /* DEVICE_ORDINAL */
    case 10: *(unsigned *)out = r.kind == KIND_ARENA; break; /* IS_LEGACY_CUDA_IPC_CAPABLE */
    case 11: *(CUdeviceptr *)out = r.start; break; /* RANGE_START_ADDR */
    case 12: *(size_t *)out = r.bytes; break; /* RANGE_SIZE */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **out, CUdeviceptr p) {
    for (unsigned i = 0; i < n; i++) {
        CUresult e = cuPointerGetAttribute(out[i], attrs[i], p);
        if (e)
            return e;
    }
    return CUDA_SUCCESS;
}

struct memcpy2d { /* CUDA_MEMCPY2D */
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
};

static void copy_2d(const struct memcpy2d *m) {
    const char *s = m->srcMemoryType == MEM_HOST ? m->srcHost : (const char *)(uintptr_t)m->srcDevice;
    char *d = m->dstMemoryType == MEM_HOST ? m->dstHost : (char *)(uintptr_t)m->dstDevice;
    if (m->srcMemoryType == 4 /* UNIFIED */)
        s = (const char *)(uintptr_t)m->srcDevice;
    if (m->dstMemoryType == 4)
        d = (char *)(uintptr_t)m->dstDevice;
    for (size_t y = 0; y < m->Height; y++)
        memmove(d + (m->dstY + y) * m->dstPitch + m->dstXInBytes, s + (m->srcY + y) * m->srcPitch + m->srcXInBytes, m->WidthInBytes);
}

/* ---- streams ----
 * By default every stream is synchronous: an operation runs in its call (what instruction
 * counts want). NULLDEV_STREAMS=async gives each stream a worker thread that runs its
 * operations in order (copies, memsets, value writes and waits, waits for events; a kernel is a
 * no-op), so a stream may wait (cuStreamWaitValue32) for what the host does after the call, as
 * the stream-ordered MPI paths need; the synchronous driver calls (cuMemcpyHtoD, cuMemcpyDtoH,
 * cuMemsetD32, cuMemFree, ...) and cuCtxSynchronize wait for every stream first. */

enum { OP_COPY, OP_SET8, OP_SET32, OP_COPY2D, OP_WRITE32, OP_WAIT32, OP_WAIT_SEQ, OP_NOP, OP_KERNEL };

struct stream;
struct op {
    int kind;
    char *dst;
    const char *src;
    size_t n;
    unsigned v, flags;
    struct memcpy2d m;
    struct stream *other; /* OP_WAIT_SEQ: until `other` has run `seq` operations */
    unsigned long long seq;
    void *call; /* OP_KERNEL: a struct launch, freed once run */
    struct op *next;
};

struct stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct op *head, *tail;
    unsigned long long enqueued, done;
    int stop;
    pthread_t thread;
    struct stream *next_all;
};

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stream *all_streams, *legacy;

static int async_streams(void) {
    static int mode = -1;
    return env_is("NULLDEV_STREAMS", "async", &mode);
}

/* cuStreamWaitValue32's test: GEQ cyclic as the driver's ((int32_t)(word - v) >= 0), EQ, AND, NOR. */
static int reached(const char *addr, unsigned v, unsigned flags) {
    unsigned now = __atomic_load_n((const unsigned *)addr, __ATOMIC_ACQUIRE);
    switch (flags & 3) {
    case 0: return (int)(now - v) >= 0;
    case 1: return now == v;
    case 2: return (now & v) != 0;
    default: return ~(now | v) != 0;
    }
}

static void wait_done(struct stream *s, unsigned long long seq) {
    pthread_mutex_lock(&s->mu);
    while (s->done < seq)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

struct launch;
static void run_kernel(const struct launch *l);

static void run_op(const struct op *o) {
    switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->src, o->n); break;
    case OP_SET8: memset(o->dst, (int)o->v, o->n); break;
    case OP_SET32:
        for (size_t i = 0; i < o->n; i++)
            ((unsigned *)o->dst)[i] = o->v;
        break;
    case OP_COPY2D: copy_2d(&o->m); break;
    case OP_WRITE32: __atomic_store_n((unsigned *)o->dst, o->v, __ATOMIC_RELEASE); break;
    case OP_WAIT32:
        while (!reached(o->dst, o->v, o->flags))
            usleep(5);
        break;
    case OP_WAIT_SEQ: wait_done(o->other, o->seq); break;
    case OP_KERNEL:
        run_kernel(o->call);
        free(o->call);
        break;
    default: break;
    }
}

static void *worker(void *arg) {
    struct stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        struct op *o = s->head;
        pthread_mutex_unlock(&s->mu);
        run_op(o);
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        pthread_cond_broadcast(&s->cv);
        free(o);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static struct stream *stream_new(void) {
    struct stream *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, worker, s))
        abort();
    pthread_mutex_lock(&all_lock);
    s->next_all = all_streams;
    all_streams = s;
    pthread_mutex_unlock(&all_lock);
    return s;
}

/* NULL, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are one default stream here. */
static struct stream *resolve(CUstream st) {
    if ((uintptr_t)st > 2)
        return st;
    pthread_mutex_lock(&all_lock);
    struct stream *s = legacy;
    pthread_mutex_unlock(&all_lock);
    if (s)
        return s;
    s = stream_new();
    pthread_mutex_lock(&all_lock);
    if (!legacy)
        legacy = s;
    s = legacy;
    pthread_mutex_unlock(&all_lock);
    return s;
}

/* Runs `o` in order on `st` (async) or now; the stream's count of operations once it has run. */
static unsigned long long submit(CUstream st, struct op o) {
    if (!async_streams()) {
        run_op(&o);
        return 0;
    }
    struct stream *s = resolve(st);
    struct op *p = malloc(sizeof *p);
    if (!p)
        abort();
    *p = o;
    p->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = p;
    else
        s->head = p;
    s->tail = p;
    unsigned long long seq = ++s->enqueued;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return seq;
}

static void sync_stream(struct stream *s) {
    pthread_mutex_lock(&s->mu);
    while (s->done < s->enqueued)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void sync_all(void) {
    if (!async_streams())
        return;
    pthread_mutex_lock(&all_lock);
    for (struct stream *s = all_streams; s; s = s->next_all)
        sync_stream(s);
    pthread_mutex_unlock(&all_lock);
}

static struct op op_copy(void *d, const void *s, size_t n) { return (struct op){.kind = OP_COPY, .dst = d, .src = s, .n = n}; }

/* Copies and memsets. */
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { submit(st, op_copy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n)); return CUDA_SUCCESS; }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { sync_all(); memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { return cuMemcpyAsync(d, (CUdeviceptr)(uintptr_t)s, n, st); }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return cuMemcpy(d, (CUdeviceptr)(uintptr_t)s, n); }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return cuMemcpy((CUdeviceptr)(uintptr_t)d, s, n); }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { return cuMemcpyAsync((CUdeviceptr)(uintptr_t)d, s, n, st); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return cuMemcpyAsync(d, s, n, st); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpy(d, s, n); }
CUresult cuMemcpy2DAsync_v2(const struct memcpy2d *m, CUstream st) { submit(st, (struct op){.kind = OP_COPY2D, .m = *m}); return CUDA_SUCCESS; }
CUresult cuMemcpy2D_v2(const struct memcpy2d *m) { sync_all(); copy_2d(m); return CUDA_SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) { submit(st, (struct op){.kind = OP_SET8, .dst = (char *)(uintptr_t)d, .v = v, .n = n}); return CUDA_SUCCESS; }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { sync_all(); memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream st) { submit(st, (struct op){.kind = OP_SET32, .dst = (char *)(uintptr_t)d, .v = v, .n = n}); return CUDA_SUCCESS; }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) {
    sync_all();
    struct op o = {.kind = OP_SET32, .dst = (char *)(uintptr_t)d, .v = v, .n = n};
    run_op(&o);
    return CUDA_SUCCESS;
}

/* ---- streams and events ---- */

CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    (void)flags;
    if (no_context())
        return CUDA_ERROR_INVALID_CONTEXT;
    *s = async_streams() ? (void *)stream_new() : malloc(1);
    return CUDA_SUCCESS;
}
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio) { (void)prio; return cuStreamCreate(s, flags); }
/* The stream's memory is kept (an event recorded on it may still be queried). */
CUresult cuStreamDestroy_v2(CUstream st) {
    if (!async_streams()) {
        free(st);
        return CUDA_SUCCESS;
    }
    struct stream *s = resolve(st);
    if (s == legacy)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
CUresult cuStreamSynchronize(CUstream s) {
    if (async_streams())
        sync_stream(resolve(s));
    return CUDA_SUCCESS;
}
CUresult cuStreamQuery(CUstream st) {
    if (!async_streams())
        return CUDA_SUCCESS;
    struct stream *s = resolve(st);
    pthread_mutex_lock(&s->mu);
    int idle = s->done == s->enqueued;
    pthread_mutex_unlock(&s->mu);
    return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuStreamIsCapturing(CUstream s, int *status) { (void)s; *status = 0; return CUDA_SUCCESS; }
CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, unsigned v, unsigned flags) {
    (void)flags;
    submit(s, (struct op){.kind = OP_WRITE32, .dst = (char *)(uintptr_t)addr, .v = v});
    return CUDA_SUCCESS;
}
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, unsigned v, unsigned flags) { return cuStreamWriteValue32_v2(s, addr, v, flags); }
/* Synchronous streams cannot wait for what the host does after the call: there a word already
 * reached passes and any other wait is CUDA_ERROR_NOT_SUPPORTED (the stream-ordered MPI paths
 * then fail instead of hanging). Asynchronous streams wait. */
CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, unsigned v, unsigned flags) {
    if (!async_streams())
        return reached((const char *)(uintptr_t)addr, v, flags) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    submit(s, (struct op){.kind = OP_WAIT32, .dst = (char *)(uintptr_t)addr, .v = v, .flags = flags});
    return CUDA_SUCCESS;
}
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, unsigned v, unsigned flags) { return cuStreamWaitValue32_v2(s, addr, v, flags); }
CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned n, void *ops, unsigned flags) {
    (void)s; (void)n; (void)ops; (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamBatchMemOp(CUstream s, unsigned n, void *ops, unsigned flags) { return cuStreamBatchMemOp_v2(s, n, ops, flags); }

/* An event: the stream it was last recorded on, and that stream's count of operations then. */
struct event {
    struct stream *s;
    unsigned long long seq;
};
CUresult cuEventCreate(CUevent *e, unsigned flags) {
    (void)flags;
    if (no_context())
        return CUDA_ERROR_INVALID_CONTEXT;
    *e = calloc(1, sizeof(struct event));
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) { free(e); return CUDA_SUCCESS; }
CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }
CUresult cuEventRecord(CUevent ev, CUstream st) {
    if (!async_streams())
        return CUDA_SUCCESS;
    struct event *e = ev;
    struct stream *s = resolve(st);
    pthread_mutex_lock(&s->mu);
    e->s = s;
    e->seq = s->enqueued;
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent ev) {
    struct event *e = ev;
    if (!e->s)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&e->s->mu);
    int done = e->s->done >= e->seq;
    pthread_mutex_unlock(&e->s->mu);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventSynchronize(CUevent ev) {
    struct event *e = ev;
    if (e->s)
        wait_done(e->s, e->seq);
    return CUDA_SUCCESS;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned flags) {
    (void)flags;
    struct event *e = ev;
    if (e->s)
        submit(s, (struct op){.kind = OP_WAIT_SEQ, .other = e->s, .seq = e->seq});
    return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 0; return CUDA_SUCCESS; }

/* ---- kernels, emulated by name ----
 * The kernels gpuwire compiles (src/device/kernels.rs: gw_<dtype>_<op> combine, gw_<dtype>_div,
 * gw_<dtype>_sum_all and _sum_all_v, gw_pack_<bytes>) and the GPU tests' own (tests/gpu.rs:
 * spin, fill_f32, scale_f32, scale_f64) run on the stream as C loops with the same semantics
 * (integers wrap, float16/bfloat16 compute in float32 and round to nearest even at every step,
 * the complex product, MINLOC/MAXLOC's lower index of equal values). Any other kernel: a no-op
 * with a warning, or a failed launch with NULLDEV_KERNELS=fail. */

enum { K_OTHER, K_SPIN, K_FILL_F32, K_SCALE_F32, K_SCALE_F64, K_COMBINE, K_DIV, K_SUM_ALL, K_SUM_ALL_V, K_PACK,
       K_AFILL, K_AXPY, K_ASCALE, K_ARED, K_AFINAL };
/* The distributed arrays' reductions (src/device/array_kernels.rs) and their accumulators. */
enum { R_DOT, R_SUM, R_NORM1, R_NORM2SQ, R_NORMINF, R_MIN, R_MAX };
enum { C_ADD, C_MIN, C_MAX };
enum { A_F64, A_C128, A_U64, A_I64 };
static const char *red_names[] = {"dot", "sum", "norm1", "norm2sq", "norminf", "min", "max"};
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_BF16, T_F32, T_F64, T_C64, T_C128, T_FI, T_DI, T_II };
enum { O_SUM, O_PROD, O_MAX, O_MIN, O_BAND, O_BOR, O_BXOR, O_LAND, O_LOR, O_LXOR, O_MINLOC, O_MAXLOC };

static const char *type_names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
                                   "float32", "float64", "complex64", "complex128", "float32_int32", "float64_int32", "int32_int32"};
static const size_t type_sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 8, 16, 8, 16, 8};
static const char *op_names[] = {"sum", "prod", "max", "min", "band", "bor", "bxor", "land", "lor", "lxor", "minloc", "maxloc"};

struct kernel {
    int kind, type, op;
    size_t width; /* K_PACK, K_AFILL: element bytes */
    int comb, acc; /* K_ARED, K_AFINAL */
};

struct fi { float v; int i; };
struct di { double v; int i; };
struct ii { int v; int i; };

static float bf16_load(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t bf16_store(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float f16_load(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static uint16_t f16_store(float f) { _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h; }

#define FMAX(y, x) (((y) > (x) || (x) != (x)) ? (y) : (x))
#define FMIN(y, x) (((y) < (x) || (x) != (x)) ? (y) : (x))
#define INT_OP(T, U)                                                                   \
    do {                                                                               \
        T y, x;                                                                        \
        memcpy(&y, yp, sizeof y);                                                      \
        memcpy(&x, xp, sizeof x);                                                      \
        T r;                                                                           \
        switch (op) {                                                                  \
        case O_SUM: r = (T)((U)y + (U)x); break;                                       \
        case O_PROD: r = (T)((U)y * (U)x); break;                                      \
        case O_MAX: r = y > x ? y : x; break;                                          \
        case O_MIN: r = y < x ? y : x; break;                                          \
        case O_BAND: r = (T)(y & x); break;                                            \
        case O_BOR: r = (T)(y | x); break;                                             \
        case O_BXOR: r = (T)(y ^ x); break;                                            \
        case O_LAND: r = (T)(y != 0 && x != 0); break;                                 \
        case O_LOR: r = (T)(y != 0 || x != 0); break;                                  \
        default: r = (T)((y != 0) != (x != 0)); break;                                 \
        }                                                                              \
        memcpy(xp, &r, sizeof r);                                                      \
    } while (0)
#define FLOAT_OP(T)                                                                    \
    do {                                                                               \
        T y, x;                                                                        \
        memcpy(&y, yp, sizeof y);                                                      \
        memcpy(&x, xp, sizeof x);                                                      \
        T r = op == O_SUM ? y + x : op == O_PROD ? y * x : op == O_MAX ? FMAX(y, x) : FMIN(y, x); \
        memcpy(xp, &r, sizeof r);                                                      \
    } while (0)
#define HALF_OP(LOAD, STORE)                                                           \
    do {                                                                               \
        uint16_t a, b;                                                                 \
        memcpy(&a, yp, 2);                                                             \
        memcpy(&b, xp, 2);                                                             \
        float y = LOAD(a), x = LOAD(b);                                                \
        float r = op == O_SUM ? y + x : op == O_PROD ? y * x : op == O_MAX ? FMAX(y, x) : FMIN(y, x); \
        uint16_t h = STORE(r);                                                         \
        memcpy(xp, &h, 2);                                                             \
    } while (0)
#define COMPLEX_OP(T)                                                                  \
    do {                                                                               \
        T y[2], x[2], r[2];                                                            \
        memcpy(y, yp, sizeof y);                                                       \
        memcpy(x, xp, sizeof x);                                                       \
        if (op == O_SUM) {                                                             \
            r[0] = y[0] + x[0];                                                        \
            r[1] = y[1] + x[1];                                                        \
        } else {                                                                       \
            r[0] = y[0] * x[0] - y[1] * x[1];                                          \
            r[1] = y[0] * x[1] + y[1] * x[0];                                          \
        }                                                                              \
        memcpy(xp, r, sizeof r);                                                       \
    } while (0)
#define PAIR_OP(T)                                                                     \
    do {                                                                               \
        T y, x;                                                                        \
        memcpy(&y, yp, sizeof y);                                                      \
        memcpy(&x, xp, sizeof x);                                                      \
        int take_y = op == O_MINLOC ? (y.v < x.v || (y.v == x.v && y.i < x.i)) : (y.v > x.v || (y.v == x.v && y.i < x.i)); \
        if (take_y)                                                                    \
            memcpy(xp, &y, sizeof y);                                                  \
    } while (0)

/* *xp = *yp op *xp, as the kernels' `x = y op x` (y the input, x the accumulator). */
static void combine_one(int type, int op, char *xp, const char *yp) {
    switch (type) {
    case T_I8: INT_OP(int8_t, uint8_t); break;
    case T_U8: INT_OP(uint8_t, uint8_t); break;
    case T_I32: INT_OP(int32_t, uint32_t); break;
    case T_U32: INT_OP(uint32_t, uint32_t); break;
    case T_I64: INT_OP(int64_t, uint64_t); break;
    case T_U64: INT_OP(uint64_t, uint64_t); break;
    case T_F16: HALF_OP(f16_load, f16_store); break;
    case T_BF16: HALF_OP(bf16_load, bf16_store); break;
    case T_F32: FLOAT_OP(float); break;
    case T_F64: FLOAT_OP(double); break;
    case T_C64: COMPLEX_OP(float); break;
    case T_C128: COMPLEX_OP(double); break;
    case T_FI: PAIR_OP(struct fi); break;
    case T_DI: PAIR_OP(struct di); break;
    default: PAIR_OP(struct ii); break;
    }
}

static void divide_one(int type, char *xp, int64_t d) {
#define DIV_INT(T) do { T v; memcpy(&v, xp, sizeof v); v = (T)((int64_t)v / d); memcpy(xp, &v, sizeof v); } while (0)
#define DIV_UINT(T) do { T v; memcpy(&v, xp, sizeof v); v = (T)((uint64_t)v / (uint64_t)d); memcpy(xp, &v, sizeof v); } while (0)
#define DIV_FLOAT(T, N) do { T v[N]; memcpy(v, xp, sizeof v); for (int k = 0; k < N; k++) v[k] = v[k] / (T)d; memcpy(xp, v, sizeof v); } while (0)
    uint16_t h;
    switch (type) {
    case T_I8: DIV_INT(int8_t); break;
    case T_I32: DIV_INT(int32_t); break;
    case T_I64: DIV_INT(int64_t); break;
    case T_U8: DIV_UINT(uint8_t); break;
    case T_U32: DIV_UINT(uint32_t); break;
    case T_U64: DIV_UINT(uint64_t); break;
    case T_F16: memcpy(&h, xp, 2); h = f16_store(f16_load(h) / (float)d); memcpy(xp, &h, 2); break;
    case T_BF16: memcpy(&h, xp, 2); h = bf16_store(bf16_load(h) / (float)d); memcpy(xp, &h, 2); break;
    case T_F32: DIV_FLOAT(float, 1); break;
    case T_F64: DIV_FLOAT(double, 1); break;
    case T_C64: DIV_FLOAT(float, 2); break;
    case T_C128: DIV_FLOAT(double, 2); break;
    default: break;
    }
}

/* One launch, its arguments copied at the call (they point into the caller's stack). */
struct launch {
    const struct kernel *k;
    uint64_t v[11];
    uint64_t ptrs[16]; /* gw_ptrs: in[8], out[8] */
    float f;
    double d;
    unsigned char val[16]; /* an argument passed by value (fill value, axpy/scale factor, identity) */
    unsigned grid, block;
};

/* ---- the distributed arrays' kernels, in the GPU's order of operations ---- */

typedef union {
    double f;
    struct { double re, im; } c;
    uint64_t u;
    int64_t i;
} acc_t;

static double hypot_host(double re, double im) { /* array_kernels.rs gw_hypot */
    double a = fabs(re), b = fabs(im);
    if (isinf(a) || isinf(b)) return INFINITY;
    if (isnan(a) || isnan(b)) return NAN;
    double m = a > b ? a : b, n = a > b ? b : a;
    if (m == 0.0) return 0.0;
    double r = n / m;
    return m * sqrt(1.0 + r * r);
}

/* Element i's contribution to reduction `red` of type `type` (x, y the arrays). */
static acc_t element(int red, int type, const char *x, const char *y, uint64_t i) {
    acc_t a = {0};
    size_t es = type_sizes[type];
    const char *xp = x + i * es, *yp = y ? y + i * es : NULL;
    double xr = 0, xi = 0, yr = 0, yi = 0;
    int complex_t = type == T_C64 || type == T_C128, float_t = type == T_F32 || type == T_F64;
    if (type == T_F32) { float v; memcpy(&v, xp, 4); xr = v; if (yp) { memcpy(&v, yp, 4); yr = v; } }
    if (type == T_F64) { memcpy(&xr, xp, 8); if (yp) memcpy(&yr, yp, 8); }
    if (type == T_C64) { float v[2]; memcpy(v, xp, 8); xr = v[0]; xi = v[1]; if (yp) { memcpy(v, yp, 8); yr = v[0]; yi = v[1]; } }
    if (type == T_C128) { double v[2]; memcpy(v, xp, 16); xr = v[0]; xi = v[1]; if (yp) { memcpy(v, yp, 16); yr = v[0]; yi = v[1]; } }
    int64_t si = 0;
    uint64_t ui = 0;
    switch (type) {
    case T_I8: { int8_t v; memcpy(&v, xp, 1); si = v; ui = (uint64_t)(int64_t)v; break; }
    case T_I32: { int32_t v; memcpy(&v, xp, 4); si = v; ui = (uint64_t)(int64_t)v; break; }
    case T_I64: { int64_t v; memcpy(&v, xp, 8); si = v; ui = (uint64_t)v; break; }
    case T_U8: { uint8_t v; memcpy(&v, xp, 1); ui = v; break; }
    case T_U32: { uint32_t v; memcpy(&v, xp, 4); ui = v; break; }
    case T_U64: { memcpy(&ui, xp, 8); break; }
    default: break;
    }
    int signed_t = type == T_I8 || type == T_I32 || type == T_I64;
    switch (red) {
    case R_DOT:
        if (complex_t) { a.c.re = xr * yr + xi * yi; a.c.im = xr * yi - xi * yr; }
        else a.f = xr * yr;
        break;
    case R_SUM:
        if (complex_t) { a.c.re = xr; a.c.im = xi; }
        else if (float_t) a.f = xr;
        else a.u = ui;
        break;
    case R_NORM1: case R_NORMINF: a.f = complex_t ? hypot_host(xr, xi) : fabs(xr); break;
    case R_NORM2SQ: a.f = complex_t ? xr * xr + xi * xi : xr * xr; break;
    default: /* min, max */
        if (float_t) a.f = xr;
        else if (signed_t) a.i = si;
        else a.u = ui;
    }
    return a;
}

static acc_t combine_acc(int acc, int comb, acc_t a, acc_t b) {
    acc_t r = a;
    switch (acc) {
    case A_F64:
        if (comb == C_ADD) r.f = a.f + b.f;
        else if (isnan(a.f) || isnan(b.f)) r.f = isnan(a.f) ? a.f : b.f;
        else r.f = comb == C_MAX ? (a.f > b.f ? a.f : b.f) : (a.f < b.f ? a.f : b.f);
        break;
    case A_C128: r.c.re = a.c.re + b.c.re; r.c.im = a.c.im + b.c.im; break;
    case A_U64: r.u = comb == C_ADD ? a.u + b.u : comb == C_MAX ? (a.u > b.u ? a.u : b.u) : (a.u < b.u ? a.u : b.u); break;
    default: r.i = comb == C_MAX ? (a.i > b.i ? a.i : b.i) : (a.i < b.i ? a.i : b.i); break;
    }
    return r;
}

static size_t acc_size(int acc) { return acc == A_C128 ? 16 : 8; }

/* The block's fixed tree (gw_block_reduce), over `block` values. */
static acc_t tree(acc_t *v, unsigned block, int acc, int comb) {
    for (unsigned s = block / 2; s > 0; s >>= 1)
        for (unsigned t = 0; t < s; t++)
            v[t] = combine_acc(acc, comb, v[t], v[t + s]);
    return v[0];
}

static void run_array_kernel(const struct launch *l) {
    const struct kernel *k = l->k;
    size_t es = type_sizes[k->type];
    switch (k->kind) {
    case K_AFILL:
        for (uint64_t i = 0; i < l->v[1]; i++)
            memcpy((char *)(uintptr_t)l->v[0] + i * k->width, l->val, k->width);
        break;
    case K_AXPY: case K_ASCALE: {
        int axpy = k->kind == K_AXPY;
        char *out = (char *)(uintptr_t)l->v[0];
        const char *in = axpy ? (const char *)(uintptr_t)l->v[1] : out;
        uint64_t n = axpy ? l->v[2] : l->v[1];
        for (uint64_t i = 0; i < n; i++) {
            if (k->type == T_F32 || k->type == T_F64) {
                double a, x, y;
                if (k->type == T_F32) {
                    float af, xf, yf;
                    memcpy(&af, l->val, 4); memcpy(&xf, in + i * 4, 4); memcpy(&yf, out + i * 4, 4);
                    float r = axpy ? af * xf + yf : af * xf;
                    memcpy(out + i * 4, &r, 4);
                    continue;
                }
                memcpy(&a, l->val, 8); memcpy(&x, in + i * 8, 8); memcpy(&y, out + i * 8, 8);
                double r = axpy ? a * x + y : a * x;
                memcpy(out + i * 8, &r, 8);
            } else if (k->type == T_C64) {
                float a[2], x[2], y[2], r[2];
                memcpy(a, l->val, 8); memcpy(x, in + i * 8, 8); memcpy(y, out + i * 8, 8);
                r[0] = a[0] * x[0] - a[1] * x[1];
                r[1] = a[0] * x[1] + a[1] * x[0];
                if (axpy) { r[0] = r[0] + y[0]; r[1] = r[1] + y[1]; }
                memcpy(out + i * 8, r, 8);
            } else {
                double a[2], x[2], y[2], r[2];
                memcpy(a, l->val, 16); memcpy(x, in + i * 16, 16); memcpy(y, out + i * 16, 16);
                r[0] = a[0] * x[0] - a[1] * x[1];
                r[1] = a[0] * x[1] + a[1] * x[0];
                if (axpy) { r[0] = r[0] + y[0]; r[1] = r[1] + y[1]; }
                memcpy(out + i * 16, r, 16);
            }
        }
        (void)es;
        break;
    }
    case K_ARED: {
        const char *x = (const char *)(uintptr_t)l->v[0], *y = (const char *)(uintptr_t)l->v[1];
        uint64_t n = l->v[2];
        char *partial = (char *)(uintptr_t)l->v[3];
        acc_t ident, *v = calloc(l->block, sizeof *v);
        memcpy(&ident, l->val, acc_size(k->acc));
        uint64_t stride = (uint64_t)l->grid * l->block;
        for (unsigned b = 0; b < l->grid; b++) {
            for (unsigned t = 0; t < l->block; t++) {
                v[t] = ident;
                for (uint64_t i = (uint64_t)b * l->block + t; i < n; i += stride)
                    v[t] = combine_acc(k->acc, k->comb, v[t], element(k->op, k->type, x, k->op == R_DOT ? y : NULL, i));
            }
            acc_t r = tree(v, l->block, k->acc, k->comb);
            memcpy(partial + b * acc_size(k->acc), &r, acc_size(k->acc));
        }
        free(v);
        break;
    }
    case K_AFINAL: {
        const char *partial = (const char *)(uintptr_t)l->v[0];
        uint64_t np = l->v[1];
        char *out = (char *)(uintptr_t)l->v[2];
        acc_t ident, *v = calloc(l->block, sizeof *v);
        memcpy(&ident, l->val, acc_size(k->acc));
        for (unsigned t = 0; t < l->block; t++) {
            v[t] = ident;
            for (uint64_t i = t; i < np; i += l->block) {
                acc_t p = {0};
                memcpy(&p, partial + i * acc_size(k->acc), acc_size(k->acc));
                v[t] = combine_acc(k->acc, k->comb, v[t], p);
            }
        }
        acc_t r = tree(v, l->block, k->acc, k->comb);
        memcpy(out, &r, acc_size(k->acc));
        free(v);
        break;
    }
    default: break;
    }
}

static void run_kernel(const struct launch *l) {
    const struct kernel *k = l->k;
    size_t es = type_sizes[k->type];
    switch (k->kind) {
    case K_SPIN: usleep((useconds_t)(l->v[0] / 1000)); break;
    case K_FILL_F32:
        for (uint64_t i = 0; i < l->v[1]; i++)
            ((float *)(uintptr_t)l->v[0])[i] = l->f;
        break;
    case K_SCALE_F32:
        for (uint64_t i = 0; i < l->v[1]; i++)
            ((float *)(uintptr_t)l->v[0])[i] *= l->f;
        break;
    case K_SCALE_F64:
        for (uint64_t i = 0; i < l->v[1]; i++)
            ((double *)(uintptr_t)l->v[0])[i] *= l->d;
        break;
    case K_COMBINE:
        for (uint64_t i = 0; i < l->v[2]; i++)
            combine_one(k->type, k->op, (char *)(uintptr_t)l->v[0] + i * es, (const char *)(uintptr_t)l->v[1] + i * es);
        break;
    case K_DIV:
        for (uint64_t i = 0; i < l->v[1]; i++)
            divide_one(k->type, (char *)(uintptr_t)l->v[0] + i * es, (int64_t)l->v[2]);
        break;
    case K_SUM_ALL:
    case K_SUM_ALL_V: {
        uint64_t n = k->kind == K_SUM_ALL_V ? l->v[2] * (16 / es) : l->v[2];
        char acc[16];
        for (uint64_t i = 0; i < n; i++) {
            memcpy(acc, (const char *)(uintptr_t)l->ptrs[0] + i * es, es);
            for (uint64_t r = 1; r < l->v[0] && r < 8; r++)
                combine_one(k->type, O_SUM, acc, (const char *)(uintptr_t)l->ptrs[r] + i * es);
            for (uint64_t r = 0; r < l->v[1] && r < 8; r++)
                memcpy((char *)(uintptr_t)l->ptrs[8 + r] + i * es, acc, es);
        }
        break;
    }
    case K_AFILL: case K_AXPY: case K_ASCALE: case K_ARED: case K_AFINAL: run_array_kernel(l); break;
    case K_PACK: {
        const uint64_t *v = l->v;
        char *packed = (char *)(uintptr_t)v[0], *view = (char *)(uintptr_t)v[1];
        size_t w = k->width;
        for (uint64_t i = 0; i < v[2]; i++) {
            uint64_t t = i, c3 = t % v[5];
            t /= v[5];
            uint64_t c2 = t % v[4];
            t /= v[4];
            uint64_t c1 = t % v[3], c0 = t / v[3];
            uint64_t off = c0 * v[6] + c1 * v[7] + c2 * v[8] + c3 * v[9];
            if (v[10])
                memcpy(view + off * w, packed + i * w, w);
            else
                memcpy(packed + i * w, view + off * w, w);
        }
        break;
    }
    default: break;
    }
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) { (void)image; *m = malloc(1); return CUDA_SUCCESS; }
CUresult cuModuleUnload(CUmodule m) { free(m); return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m;
    struct kernel *k = calloc(1, sizeof *k);
    if (!k)
        return 2;
    if (!strcmp(name, "spin")) k->kind = K_SPIN;
    else if (!strcmp(name, "fill_f32")) k->kind = K_FILL_F32;
    else if (!strcmp(name, "scale_f32")) k->kind = K_SCALE_F32;
    else if (!strcmp(name, "scale_f64")) k->kind = K_SCALE_F64;
    else if (!strncmp(name, "gwa_", 4)) {
        const char *rest = name + 4;
        if (!strncmp(rest, "fill_", 5)) {
            k->kind = K_AFILL;
            k->width = (size_t)atoi(rest + 5);
        } else if (!strncmp(rest, "final_", 6)) {
            const char *c = rest + 6;
            k->comb = !strncmp(c, "add_", 4) ? C_ADD : !strncmp(c, "min_", 4) ? C_MIN : C_MAX;
            const char *a = strchr(c, '_') + 1;
            k->acc = !strcmp(a, "f64") ? A_F64 : !strcmp(a, "c128") ? A_C128 : !strcmp(a, "u64") ? A_U64 : A_I64;
            k->kind = K_AFINAL;
        } else {
            int kind = !strncmp(rest, "axpy_", 5) ? K_AXPY : !strncmp(rest, "scale_", 6) ? K_ASCALE : K_ARED;
            const char *tn = strchr(rest, '_');
            if (kind == K_ARED) {
                /* gwa_<red>_<dtype>: the red name has no '_' except norm2sq / norminf (none). */
                for (int r = 0; r < 7; r++) {
                    size_t len = strlen(red_names[r]);
                    if (!strncmp(rest, red_names[r], len) && rest[len] == '_') {
                        k->op = r;
                        tn = rest + len;
                    }
                }
            }
            for (int ty = 0; ty < (int)(sizeof type_names / sizeof *type_names); ty++)
                if (tn && !strcmp(tn + 1, type_names[ty])) {
                    k->type = ty;
                    k->kind = kind;
                }
            if (k->kind == K_ARED) {
                /* The accumulator and combination of array_kernels.rs `plan`. */
                int complex_t = k->type == T_C64 || k->type == T_C128, float_t = k->type == T_F32 || k->type == T_F64;
                int signed_t = k->type == T_I8 || k->type == T_I32 || k->type == T_I64;
                switch (k->op) {
                case R_DOT: case R_SUM:
                    k->acc = complex_t ? A_C128 : float_t ? A_F64 : A_U64;
                    k->comb = C_ADD;
                    break;
                case R_NORM1: case R_NORM2SQ: k->acc = A_F64; k->comb = C_ADD; break;
                case R_NORMINF: k->acc = A_F64; k->comb = C_MAX; break;
                default:
                    k->acc = float_t ? A_F64 : signed_t ? A_I64 : A_U64;
                    k->comb = k->op == R_MIN ? C_MIN : C_MAX;
                }
            }
        }
    } else if (!strncmp(name, "gw_pack_", 8)) {
        k->kind = K_PACK;
        k->width = (size_t)atoi(name + 8);
    } else if (!strncmp(name, "gw_", 3)) {
        const char *rest = NULL;
        size_t best = 0;
        for (int t = 0; t < (int)(sizeof type_names / sizeof *type_names); t++) {
            size_t len = strlen(type_names[t]);
            if (len > best && !strncmp(name + 3, type_names[t], len) && name[3 + len] == '_') {
                best = len;
                k->type = t;
                rest = name + 3 + len + 1;
            }
        }
        if (rest && !strcmp(rest, "div")) k->kind = K_DIV;
        else if (rest && !strcmp(rest, "sum_all")) k->kind = K_SUM_ALL;
        else if (rest && !strcmp(rest, "sum_all_v")) k->kind = K_SUM_ALL_V;
        else if (rest)
            for (int o = 0; o < (int)(sizeof op_names / sizeof *op_names); o++)
                if (!strcmp(rest, op_names[o])) {
                    k->kind = K_COMBINE;
                    k->op = o;
                }
    }
    *f = k;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)extra;
    const struct kernel *k = f;
    const char *e = getenv("NULLDEV_KERNELS");
    if (k->kind == K_OTHER) {
        static int warned;
        if (e && !strcmp(e, "fail"))
            return CUDA_ERROR_LAUNCH_FAILED;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "null device: a kernel it does not know was launched and not run (results that depend on it are wrong)\n");
        submit(s, (struct op){.kind = OP_NOP});
        return CUDA_SUCCESS;
    }
    struct launch *l = calloc(1, sizeof *l);
    if (!l)
        return 2;
    l->k = k;
    l->grid = gx;
    l->block = bx;
    if (k->kind >= K_AFILL) {
        size_t es = type_sizes[k->type], as = k->acc == A_C128 ? 16 : 8;
        switch (k->kind) {
        case K_AFILL: /* (E *x, u64 n, E v) */
            l->v[0] = *(const uint64_t *)params[0];
            l->v[1] = *(const uint64_t *)params[1];
            memcpy(l->val, params[2], k->width);
            break;
        case K_AXPY: /* (T *y, const T *x, u64 n, T a) */
            for (int i = 0; i < 3; i++)
                l->v[i] = *(const uint64_t *)params[i];
            memcpy(l->val, params[3], es);
            break;
        case K_ASCALE: /* (T *x, u64 n, T a) */
            l->v[0] = *(const uint64_t *)params[0];
            l->v[1] = *(const uint64_t *)params[1];
            memcpy(l->val, params[2], es);
            break;
        case K_ARED: /* (const T *x, const T *y, u64 n, A ident, A *partial) */
            for (int i = 0; i < 3; i++)
                l->v[i] = *(const uint64_t *)params[i];
            memcpy(l->val, params[3], as);
            l->v[3] = *(const uint64_t *)params[4];
            break;
        default: /* K_AFINAL: (const A *partial, u32 np, A ident, A *out) */
            l->v[0] = *(const uint64_t *)params[0];
            l->v[1] = *(const uint32_t *)params[1];
            memcpy(l->val, params[2], as);
            l->v[2] = *(const uint64_t *)params[3];
        }
        submit(s, (struct op){.kind = OP_KERNEL, .call = l});
        return CUDA_SUCCESS;
    }
    int words = k->kind == K_PACK ? 10 : k->kind == K_SPIN ? 1 : k->kind == K_COMBINE || k->kind == K_DIV ? 3 : 2;
    if (k->kind == K_SUM_ALL || k->kind == K_SUM_ALL_V) {
        memcpy(l->ptrs, params[0], sizeof l->ptrs);
        l->v[0] = *(const uint32_t *)params[1];
        l->v[1] = *(const uint32_t *)params[2];
        l->v[2] = *(const uint64_t *)params[3];
    } else {
        for (int i = 0; i < words; i++)
            l->v[i] = *(const uint64_t *)params[i];
        if (k->kind == K_PACK)
            l->v[10] = *(const uint32_t *)params[10];
        if (k->kind == K_FILL_F32 || k->kind == K_SCALE_F32)
            l->f = *(const float *)params[2];
        if (k->kind == K_SCALE_F64)
            l->d = *(const double *)params[2];
    }
    submit(s, (struct op){.kind = OP_KERNEL, .call = l});
    return CUDA_SUCCESS;
}

/* ---- CUDA IPC: not supported ---- */

/* NULLDEV_IPC=1: handles of the process's device memory (see arena_alloc); else not supported. */
struct ipc_handle { /* the 64 bytes of a CUipcMemHandle */
    uint32_t magic;
    int32_t pid, fd;
    uint32_t pad;
    uint64_t offset, bytes;
    char unused[32];
};
#define IPC_MAGIC 0x4e554c44u /* "NULD" */

CUresult cuIpcGetMemHandle(void *h, CUdeviceptr p) {
    struct range r;
    if (!ipc_mode() || !lookup((uintptr_t)p, &r) || r.kind != KIND_ARENA || r.start != (uintptr_t)p)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct ipc_handle x = {IPC_MAGIC, (int32_t)getpid(), arena_fd, 0, (uint64_t)((char *)(uintptr_t)p - arena_base), pages(r.bytes), {0}};
    memcpy(h, &x, sizeof x);
    return CUDA_SUCCESS;
}
/* The handle comes by value, as the driver's CUipcMemHandle. */
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, struct ipc_handle x, unsigned flags) {
    (void)flags;
    if (x.magic != IPC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (x.pid == (int32_t)getpid())
        return 201; /* CUDA_ERROR_INVALID_CONTEXT, as the driver answers a process's own handle */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", x.pid, x.fd);
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *m = mmap(NULL, x.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)x.offset);
    close(fd);
    if (m == MAP_FAILED)
        return 2;
    remember(m, x.bytes, KIND_MAPPED);
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
CUresult cuIpcOpenMemHandle(CUdeviceptr *p, struct ipc_handle x, unsigned flags) { return cuIpcOpenMemHandle_v2(p, x, flags); }
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    sync_all();
    struct range r = range_at((uintptr_t)p);
    if (forget((void *)(uintptr_t)p) != KIND_MAPPED)
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)(uintptr_t)p, r.bytes);
    return CUDA_SUCCESS;
}

/* ---- NVRTC: compiles anything to an empty module ---- */

static const char ptx[] = "// null device\n";
int nvrtcVersion(int *major, int *minor) { *major = 12; *minor = 8; return 0; }
int nvrtcCreateProgram(void **prog, const char *src, const char *name, int n, const char *const *h, const char *const *i) {
    (void)src; (void)name; (void)n; (void)h; (void)i;
    *prog = malloc(1);
    return 0;
}
int nvrtcDestroyProgram(void **prog) { free(*prog); *prog = NULL; return 0; }
int nvrtcCompileProgram(void *prog, int n, const char *const *opts) { (void)prog; (void)n; (void)opts; return 0; }
int nvrtcGetPTXSize(void *prog, size_t *n) { (void)prog; *n = sizeof ptx; return 0; }
int nvrtcGetPTX(void *prog, char *out) { (void)prog; memcpy(out, ptx, sizeof ptx); return 0; }
int nvrtcGetProgramLogSize(void *prog, size_t *n) { (void)prog; *n = 1; return 0; }
int nvrtcGetProgramLog(void *prog, char *out) { (void)prog; out[0] = 0; return 0; }
const char *nvrtcGetErrorString(int r) { return r ? "NVRTC_ERROR (null device)" : "NVRTC_SUCCESS"; }

/* ---- NCCL, one rank ---- */

typedef struct {
    int nranks, rank;
    int aborted;
    int nonblocking; /* made with config.blocking = 0 */
    _Atomic int busy; /* polls of ncclCommGetAsyncError that still answer ncclInProgress */
    _Atomic(void *) owner; /* the thread in a call on it, or whose open group has operations on it */
} *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;

enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclInProgress = 7 };

static size_t nccl_size(int dtype) {
    switch (dtype) {
    case 0: case 1: case 10: case 11: return 1; /* int8, uint8, fp8 e4m3 / e5m2 */
    case 6: case 9: return 2; /* float16, bfloat16 */
    case 2: case 3: case 7: return 4; /* int32, uint32, float32 */
    case 4: case 5: case 8: return 8; /* int64, uint64, float64 */
    default: return 0;
    }
}

int ncclGetVersion(int *v) { *v = 22304; return ncclSuccess; }
int ncclGetUniqueId(ncclUniqueId *id) { memset(id, 0, sizeof *id); strcpy(id->internal, "null device"); return ncclSuccess; }
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    if (nranks != 1 || rank != 0) {
        *comm = NULL;
        return ncclInvalidUsage;
    }
    *comm = calloc(1, sizeof **comm);
    (*comm)->nranks = 1;
    return ncclSuccess;
}
/* A nonblocking communicator (ncclConfig_t's `blocking`, at byte 16, 0) answers its calls with
 * ncclInProgress and its asynchronous error with ncclInProgress for the next two or three
 * polls, as NCCL while it completes them in the background. */
int ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config) {
    int r = ncclCommInitRank(comm, nranks, id, rank);
    if (r || !config || *(const int *)((const char *)config + 16) != 0)
        return r;
    (*comm)->nonblocking = 1;
    (*comm)->busy = 3;
    return ncclInProgress;
}
static int in_progress(ncclComm_t c, int r) {
    if (r || !c || !c->nonblocking)
        return r;
    c->busy = 2;
    return ncclInProgress;
}
int ncclCommFinalize(ncclComm_t comm) { return in_progress(comm, ncclSuccess); }
/* Freeing a communicator that a call or an open group (this thread's too) is using: NCCL's
 * communicators take one thread at a time, and that group's ncclGroupEnd would reach freed
 * memory. Undefined in NCCL: here the process aborts. */
static void check_unused(ncclComm_t c, const char *what) {
    if (c && atomic_load(&c->owner)) {
        fprintf(stderr, "null device: %s of a communicator that a call or an open group is using (NCCL's communicators take one thread at a time)\n", what);
        abort();
    }
}
int ncclCommDestroy(ncclComm_t comm) { check_unused(comm, "ncclCommDestroy"); free(comm); return ncclSuccess; }
int ncclCommAbort(ncclComm_t comm) { check_unused(comm, "ncclCommAbort"); free(comm); return ncclSuccess; }
int ncclCommGetAsyncError(ncclComm_t comm, int *e) {
    *e = ncclSuccess;
    if (comm && comm->busy > 0) {
        comm->busy--;
        *e = ncclInProgress;
    }
    return ncclSuccess;
}
int ncclCommCount(ncclComm_t comm, int *n) { *n = comm->nranks; return ncclSuccess; }
int ncclCommUserRank(ncclComm_t comm, int *r) { *r = comm->rank; return ncclSuccess; }
const char *ncclGetErrorString(int r) { return r ? "NCCL error (null device)" : "no error"; }
const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return ""; }

/* A collective over one rank: its input copied to its output, in order on the stream. */
static int copy_one(const void *s, void *r, size_t count, int dtype, CUstream st) {
    size_t e = nccl_size(dtype);
    if (!e)
        return ncclInvalidArgument;
    if (s != r && count)
        submit(st, op_copy(r, s, count * e));
    return ncclSuccess;
}
static __thread ncclComm_t group_nonblocking; /* a nonblocking communicator of the open group */
static __thread int depth;

/* The communicators this thread's open group has operations on (it owns them until its end). */
static __thread char thread_token;
static __thread ncclComm_t touched[4096];
static __thread int n_touched;
/* A call's use of `c` (module comment): owned by this thread during the call, or inside a group
 * until the group's end (`done_comm`). */
static int use_comm(ncclComm_t c, const char *what) {
    void *mine = &thread_token, *o = NULL;
    if (!c)
        return ncclSuccess;
    if (c->nonblocking && c->busy > 0) {
        /* NCCL: after ncclInProgress, nothing may be issued on the communicator until
         * ncclCommGetAsyncError no longer answers ncclInProgress. */
        fprintf(stderr, "null device: %s on a nonblocking communicator still in progress (its last call answered ncclInProgress and was not settled)\n", what);
        return ncclInvalidUsage;
    }
    if (atomic_compare_exchange_strong(&c->owner, &o, mine)) {
        if (depth && n_touched < 4096)
            touched[n_touched++] = c;
        return ncclSuccess;
    }
    if (o == mine && depth)
        return ncclSuccess;
    fprintf(stderr, "null device: %s on a communicator that another thread's call or open group is using (NCCL's communicators are not thread-safe)\n", what);
    return ncclInvalidUsage;
}
/* After a call on `c`: outside a group, this thread's use of it ends. */
static void done_comm(ncclComm_t c) {
    if (c && !depth)
        atomic_store(&c->owner, NULL);
}
/* A call's answer: inside a group the group's end answers for a nonblocking communicator. */
static int answer(ncclComm_t c, int r) {
    if (depth && c && c->nonblocking && !r) {
        group_nonblocking = c;
        return r;
    }
    return depth ? r : in_progress(c, r);
}
/* NULLDEV_THRASH=BYTES: each launch (a collective, a send or receive outside a group, a group's
 * end) writes that many bytes of other memory, as a real NCCL launch (driver, kernel arguments)
 * replaces much of the CPU's caches: what the rest of the caller's call, and its next call, then
 * find cold (`null-device.sh cold` counts those cache misses, with callgrind's collection
 * toggled off inside this function). */
__attribute__((noinline)) void nulldev_thrash(void) {
    static long bytes = -1;
    static char *junk;
    if (bytes < 0) {
        const char *e = getenv("NULLDEV_THRASH");
        bytes = e ? atol(e) : 0;
        if (bytes > 0 && !(junk = malloc((size_t)bytes)))
            bytes = 0;
    }
    if (bytes > 0)
        memset(junk, (int)(bytes & 0x7f), (size_t)bytes);
}

/* A collective: `c` used by this thread for the call (or its group). */
static int collective(const void *s, void *r, size_t n, int dt, ncclComm_t c, CUstream st, const char *what) {
    nulldev_thrash();
    int u = use_comm(c, what);
    if (u)
        return u;
    int x = answer(c, copy_one(s, r, n, dt, st));
    done_comm(c);
    return x;
}
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, CUstream st) { (void)op; return collective(s, r, n, dt, c, st, "ncclAllReduce"); }
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, CUstream st) { (void)root; return collective(s, r, n, dt, c, st, "ncclBroadcast"); }
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t c, CUstream st) { (void)op; (void)root; return collective(s, r, n, dt, c, st, "ncclReduce"); }
int ncclAllGather(const void *s, void *r, size_t n, int dt, ncclComm_t c, CUstream st) { return collective(s, r, n, dt, c, st, "ncclAllGather"); }
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, CUstream st) { (void)op; return collective(s, r, n, dt, c, st, "ncclReduceScatter"); }

/* Point-to-point to oneself: sends and receives wait in order until the outermost group ends,
 * and there each send meets the receive of the same communicator in the same place in order
 * (as NCCL matches by peer and order). What is left unmatched then would hang a real NCCL: the
 * group end fails with ncclInvalidUsage and says so on stderr. */
struct p2p {
    void *ptr;
    size_t bytes;
    CUstream stream;
    ncclComm_t comm;
};
#define P2P_MAX 1024
static __thread struct p2p sends[P2P_MAX], recvs[P2P_MAX];
static __thread int n_sends, n_recvs;

static int match(void) {
    int r = ncclSuccess;
    char used[P2P_MAX] = {0};
    for (int i = 0; i < n_sends; i++) {
        int j = 0;
        while (j < n_recvs && (used[j] || recvs[j].comm != sends[i].comm))
            j++;
        if (j == n_recvs || recvs[j].bytes != sends[i].bytes) {
            fprintf(stderr, "null device: an ncclSend of %zu bytes to oneself has %s at the end of its group (a real NCCL would hang)\n",
                    sends[i].bytes, j == n_recvs ? "no ncclRecv" : "an ncclRecv of another size");
            r = ncclInvalidUsage;
            continue;
        }
        used[j] = 1;
        /* On the receive's stream, after what the send's stream had before the send. */
        if (async_streams() && resolve(sends[i].stream) != resolve(recvs[j].stream)) {
            struct stream *from = resolve(sends[i].stream);
            pthread_mutex_lock(&from->mu);
            unsigned long long seq = from->enqueued;
            pthread_mutex_unlock(&from->mu);
            submit(recvs[j].stream, (struct op){.kind = OP_WAIT_SEQ, .other = from, .seq = seq});
        }
        submit(recvs[j].stream, op_copy(recvs[j].ptr, sends[i].ptr, sends[i].bytes));
    }
    for (int j = 0; j < n_recvs; j++)
        if (!used[j]) {
            fprintf(stderr, "null device: an ncclRecv of %zu bytes from oneself has no ncclSend at the end of its group (a real NCCL would hang)\n", recvs[j].bytes);
            r = ncclInvalidUsage;
        }
    n_sends = n_recvs = 0;
    return r;
}
static int post(struct p2p *q, int *n, void *ptr, size_t count, int dt, int peer, CUstream st, ncclComm_t c, const char *what) {
    if (peer != 0 || !nccl_size(dt) || *n == P2P_MAX)
        return ncclInvalidArgument;
    int u = use_comm(c, what);
    if (u)
        return u;
    q[(*n)++] = (struct p2p){ptr, count * nccl_size(dt), st, c};
    if (!depth)
        nulldev_thrash();
    int x = answer(c, depth ? ncclSuccess : match());
    done_comm(c);
    return x;
}
int ncclSend(const void *s, size_t n, int dt, int peer, ncclComm_t c, CUstream st) { return post(sends, &n_sends, (void *)s, n, dt, peer, st, c, "ncclSend"); }
int ncclRecv(void *r, size_t n, int dt, int peer, ncclComm_t c, CUstream st) { return post(recvs, &n_recvs, r, n, dt, peer, st, c, "ncclRecv"); }
int ncclGroupStart(void) { depth++; return ncclSuccess; }
int ncclGroupEnd(void) {
    if (depth == 0)
        return ncclInvalidUsage;
    if (--depth)
        return ncclSuccess;
    nulldev_thrash();
    ncclComm_t nb = group_nonblocking;
    group_nonblocking = NULL;
    int r = in_progress(nb, match());
    for (int i = 0; i < n_touched; i++)
        atomic_store(&touched[i]->owner, NULL);
    n_touched = 0;
    return r;
}
