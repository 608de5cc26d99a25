/*
 * A fake verbs provider for tests: exports the libibverbs symbols tidewire loads (at the same
 * symbol versions) and fills a real ibv_context ops table. RC queue pairs follow the verbs state
 * machine (RESET, INIT, RTR, RTS, ERR) with the attribute masks real drivers require; RDMA READ
 * and WRITE move bytes with memcpy inside one process and process_vm_readv/writev across
 * processes. Each process publishes its memory regions and queue pairs in a table whose address,
 * with the pid, is encoded in the GID, so the initiator checks the target's rkey, range, access
 * and queue pair state the way a responder NIC would.
 *
 * No rdma-core headers: the structures below mirror the ABI (checked by tests/rdma_layout.rs on
 * the Rust side, which uses the same layouts).
 *
 * Environment (read at each call, so one process can change them between transfers):
 *   FAKE_VERBS_DEVICES   comma-separated device names (default "fake0,fake1")
 *   FAKE_VERBS_DOWN      device whose port reports DOWN
 *   FAKE_VERBS_MAX_WR    cap on max_send_wr of every queue pair (a queue that fills)
 *   FAKE_VERBS_SLOW_POLL_US  each poll that finds work waits this long and reaps one entry
 *   FAKE_VERBS_HIDE_CAP  with 1, do not report that cap back: posting past it fails ENOMEM
 *   FAKE_VERBS_FAIL_DEV  every work request posted on this local device completes in error
 *   FAKE_VERBS_FAIL_EVERY  every Nth work request (process-wide) completes in error
 *   FAKE_VERBS_FAIL_STATUS the error status to use (default 12, IBV_WC_RETRY_EXC_ERR)
 *   FAKE_VERBS_HOLD      with 1, work requests posted meanwhile never execute nor complete (a
 *                        black-holed peer) until their queue pair is moved to ERR, which
 *                        flushes them (IBV_WC_WR_FLUSH_ERR), as real devices do; also switched
 *                        at run time with fake_verbs_set_hold(int)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- ABI mirrors ------------------------------------------------------------------------ */
struct ibv_device {
    void *ops[2];
    int node_type, transport_type;
    char name[64], dev_name[64], dev_path[256], ibdev_path[256];
};
struct ibv_cq;
struct ibv_qp;
struct ibv_wc;
struct ibv_send_wr;
struct ibv_recv_wr;
struct ibv_context_ops {
    void *slots0[11];
    int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
    int (*req_notify_cq)(struct ibv_cq *, int);
    void *slots1[12];
    int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
    int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
    void *slots2[5];
};
struct ibv_context {
    struct ibv_device *device;
    struct ibv_context_ops ops;
    int cmd_fd, async_fd, num_comp_vectors;
    pthread_mutex_t mutex;
    void *abi_compat;
};
struct ibv_pd { struct ibv_context *context; uint32_t handle; };
struct ibv_mr {
    struct ibv_context *context; struct ibv_pd *pd; void *addr; size_t length;
    uint32_t handle, lkey, rkey;
};
struct ibv_comp_channel { struct ibv_context *context; int fd; int refcnt; };
struct ibv_cq {
    struct ibv_context *context; struct ibv_comp_channel *channel; void *cq_context;
    uint32_t handle; int cqe; pthread_mutex_t mutex; pthread_cond_t cond;
    uint32_t comp_events_completed, async_events_completed;
};
struct ibv_qp {
    struct ibv_context *context; void *qp_context; struct ibv_pd *pd;
    struct ibv_cq *send_cq, *recv_cq; void *srq; uint32_t handle, qp_num; int state, qp_type;
    pthread_mutex_t mutex; pthread_cond_t cond; uint32_t events_completed;
};
struct ibv_qp_cap { uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data; };
struct ibv_qp_init_attr {
    void *qp_context; struct ibv_cq *send_cq, *recv_cq; void *srq; struct ibv_qp_cap cap;
    int qp_type; int sq_sig_all;
};
union ibv_gid { uint8_t raw[16]; struct { uint64_t a, b; } global; };
struct ibv_global_route {
    union ibv_gid dgid; uint32_t flow_label; uint8_t sgid_index, hop_limit, traffic_class;
};
struct ibv_ah_attr {
    struct ibv_global_route grh; uint16_t dlid; uint8_t sl, src_path_bits, static_rate,
    is_global, port_num;
};
struct ibv_qp_attr {
    int qp_state, cur_qp_state, path_mtu, path_mig_state;
    uint32_t qkey, rq_psn, sq_psn, dest_qp_num; unsigned qp_access_flags;
    struct ibv_qp_cap cap; struct ibv_ah_attr ah_attr, alt_ah_attr;
    uint16_t pkey_index, alt_pkey_index;
    uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout;
    uint32_t rate_limit;
};
struct ibv_sge { uint64_t addr; uint32_t length, lkey; };
struct ibv_send_wr {
    uint64_t wr_id; struct ibv_send_wr *next; struct ibv_sge *sg_list; int num_sge, opcode;
    unsigned send_flags; uint32_t imm_data;
    union { struct { uint64_t remote_addr; uint32_t rkey; } rdma; uint64_t pad[4]; } wr;
    uint32_t xrc; uint64_t bind_mw[6];
};
struct ibv_wc {
    uint64_t wr_id; int status, opcode; uint32_t vendor_err, byte_len, imm_data, qp_num, src_qp;
    unsigned wc_flags; uint16_t pkey_index, slid; uint8_t sl, dlid_path_bits;
};
struct ibv_port_attr {
    int state, max_mtu, active_mtu, gid_tbl_len;
    uint32_t port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr;
    uint16_t pkey_tbl_len, lid, sm_lid;
    uint8_t lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed,
        phys_state, link_layer, flags;
    uint16_t port_cap_flags2;
};

enum { QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_SQD, QPS_SQE, QPS_ERR };
enum { WC_SUCCESS = 0, WC_LOC_PROT_ERR = 4, WC_WR_FLUSH_ERR = 5, WC_REM_ACCESS_ERR = 10,
       WC_RETRY_EXC_ERR = 12 };
#define QP_STATE (1 << 0)
#define QP_ACCESS_FLAGS (1 << 3)
#define QP_PKEY_INDEX (1 << 4)
#define QP_PORT (1 << 5)
#define QP_AV (1 << 7)
#define QP_PATH_MTU (1 << 8)
#define QP_TIMEOUT (1 << 9)
#define QP_RETRY_CNT (1 << 10)
#define QP_RNR_RETRY (1 << 11)
#define QP_RQ_PSN (1 << 12)
#define QP_MAX_QP_RD_ATOMIC (1 << 13)
#define QP_MIN_RNR_TIMER (1 << 15)
#define QP_SQ_PSN (1 << 16)
#define QP_MAX_DEST_RD_ATOMIC (1 << 17)
#define QP_DEST_QPN (1 << 20)
#define ACCESS_LOCAL_WRITE 1
#define ACCESS_REMOTE_WRITE 2
#define ACCESS_REMOTE_READ 4
#define WR_RDMA_WRITE 0
#define WR_RDMA_READ 4
#define WC_OP_RDMA_WRITE 1
#define WC_OP_RDMA_READ 2

/* ---- published state (read by peers) ---------------------------------------------------- */
#define MAX_DEV 8
#define MAX_MR 1024
#define MAX_QP 1024
struct pub_mr { uint64_t addr, len; uint32_t rkey, lkey, access, dev, valid, pad; };
struct pub_qp { uint32_t qpn, state, dest_qpn, dev, valid, pad; };
struct pub_state { uint64_t magic; struct pub_mr mrs[MAX_MR]; struct pub_qp qps[MAX_QP]; };
#define MAGIC 0x66616b6576657262ull

static struct pub_state g_pub = {.magic = MAGIC};
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_next_key = 0x1000;
static uint32_t g_next_qpn = 0x100;
static uint64_t g_posted;
static struct ibv_device g_devs[MAX_DEV];
static int g_ndev;

/* Counters for tests: work requests posted, failed by injection, queue-full refusals. */
static uint64_t g_stat_ok, g_stat_err, g_stat_full;
void fake_verbs_stats(uint64_t out[3]) {
    pthread_mutex_lock(&g_lock);
    out[0] = g_stat_ok; out[1] = g_stat_err; out[2] = g_stat_full;
    pthread_mutex_unlock(&g_lock);
}

/* Queue pairs that exist now (created, not destroyed), for tests of resource caps. */
/* FAKE_VERBS_HOLD switched at run time (tests cannot safely change the environment while
 * engine threads read it). */
static int g_hold;
void fake_verbs_set_hold(int on) { __atomic_store_n(&g_hold, on, __ATOMIC_SEQ_CST); }

uint64_t fake_verbs_live_qps(void) {
    uint64_t n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_QP; i++) n += g_pub.qps[i].valid ? 1 : 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}

__attribute__((constructor)) static void fake_init(void) {
#ifdef PR_SET_PTRACER
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

struct fake_ctx { struct ibv_context ctx; int dev; };
struct fake_chan { struct ibv_comp_channel ch; int wfd; };
#define RING 8192
struct fake_cq {
    struct ibv_cq cq; pthread_mutex_t lock; int armed;
    struct ibv_wc ring[RING]; struct ibv_qp *owner[RING]; unsigned head, count;
};
#define MAX_HELD 1024
struct fake_qp {
    struct ibv_qp qp; int dev; uint32_t max_wr, outstanding; int slot;
    uint32_t dest_qpn; int32_t dest_pid; uint64_t dest_pub; int dest_dev; int state;
    /* FAKE_VERBS_HOLD: posted, not completed (wr_id, opcode); guarded by the CQ lock. */
    uint64_t held_id[MAX_HELD]; int held_op[MAX_HELD]; unsigned held;
};

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void load_devices(void) {
    if (g_ndev) return;
    const char *list = getenv("FAKE_VERBS_DEVICES");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list && *list ? list : "fake0,fake1");
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && g_ndev < MAX_DEV; t = strtok_r(NULL, ",", &save)) {
        struct ibv_device *d = &g_devs[g_ndev++];
        memset(d, 0, sizeof *d);
        d->node_type = 1; d->transport_type = 0;
        snprintf(d->name, sizeof d->name, "%s", t);
        snprintf(d->dev_name, sizeof d->dev_name, "uverbs%d", g_ndev - 1);
    }
}

struct ibv_device **ibv_get_device_list(int *num) {
    pthread_mutex_lock(&g_lock);
    load_devices();
    struct ibv_device **l = calloc(g_ndev + 1, sizeof *l);
    for (int i = 0; i < g_ndev; i++) l[i] = &g_devs[i];
    if (num) *num = g_ndev;
    pthread_mutex_unlock(&g_lock);
    return l;
}
void ibv_free_device_list(struct ibv_device **l) { free(l); }
const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

static int poll_cq(struct ibv_cq *, int, struct ibv_wc *);
static int req_notify_cq(struct ibv_cq *, int);
static int post_send(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static int post_recv(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);

struct ibv_context *ibv_open_device(struct ibv_device *d) {
    struct fake_ctx *c = calloc(1, sizeof *c);
    c->ctx.device = d;
    c->dev = (int)(d - g_devs);
    c->ctx.ops.poll_cq = poll_cq;
    c->ctx.ops.req_notify_cq = req_notify_cq;
    c->ctx.ops.post_send = post_send;
    c->ctx.ops.post_recv = post_recv;
    c->ctx.cmd_fd = -1; c->ctx.async_fd = -1; c->ctx.num_comp_vectors = 1;
    pthread_mutex_init(&c->ctx.mutex, NULL);
    return &c->ctx;
}
int ibv_close_device(struct ibv_context *c) { free(c); return 0; }

int ibv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
    if (port != 1) return EINVAL;
    struct fake_ctx *fc = (struct fake_ctx *)c;
    /* Only the compat prefix is written, as libibverbs' exported ibv_query_port does. */
    memset(a, 0, 48);
    const char *down = getenv("FAKE_VERBS_DOWN");
    a->state = down && strcmp(down, c->device->name) == 0 ? 1 : 4;
    a->max_mtu = a->active_mtu = 5;
    a->gid_tbl_len = 1;
    a->lid = (uint16_t)(fc->dev + 1);
    a->link_layer = 2;
    return 0;
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
    if (port != 1 || index != 0) return -1;
    struct fake_ctx *fc = (struct fake_ctx *)c;
    uint32_t pid = (uint32_t)getpid();
    uint64_t pub = (uint64_t)(uintptr_t)&g_pub;
    gid->raw[0] = 0xfe; gid->raw[1] = 0x80; gid->raw[2] = 'F'; gid->raw[3] = (uint8_t)fc->dev;
    memcpy(gid->raw + 4, &pid, 4);
    memcpy(gid->raw + 8, &pub, 8);
    return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    pd->context = c;
    return pd;
}
int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
    if (!addr || !len) { errno = EINVAL; return NULL; }
    pthread_mutex_lock(&g_lock);
    int slot = -1;
    for (int i = 0; i < MAX_MR; i++) if (!g_pub.mrs[i].valid) { slot = i; break; }
    if (slot < 0) { pthread_mutex_unlock(&g_lock); errno = ENOMEM; return NULL; }
    struct ibv_mr *mr = calloc(1, sizeof *mr);
    mr->context = pd->context; mr->pd = pd; mr->addr = addr; mr->length = len;
    mr->handle = (uint32_t)slot;
    mr->lkey = g_next_key++;
    mr->rkey = g_next_key++;
    struct pub_mr *p = &g_pub.mrs[slot];
    p->addr = (uint64_t)(uintptr_t)addr; p->len = len; p->rkey = mr->rkey; p->lkey = mr->lkey;
    p->access = (uint32_t)access; p->dev = (uint32_t)((struct fake_ctx *)pd->context)->dev;
    p->valid = 1;
    pthread_mutex_unlock(&g_lock);
    return mr;
}
int ibv_dereg_mr(struct ibv_mr *mr) {
    pthread_mutex_lock(&g_lock);
    memset(&g_pub.mrs[mr->handle], 0, sizeof g_pub.mrs[0]);
    pthread_mutex_unlock(&g_lock);
    free(mr);
    return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return NULL;
    struct fake_chan *ch = calloc(1, sizeof *ch);
    ch->ch.context = c; ch->ch.fd = fds[0]; ch->wfd = fds[1];
    return &ch->ch;
}
int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
    struct fake_chan *f = (struct fake_chan *)ch;
    close(f->ch.fd); close(f->wfd); free(f);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_ctx,
                             struct ibv_comp_channel *ch, int vec) {
    (void)vec;
    if (cqe <= 0 || cqe >= RING) { errno = EINVAL; return NULL; }
    struct fake_cq *cq = calloc(1, sizeof *cq);
    cq->cq.context = c; cq->cq.channel = ch; cq->cq.cq_context = cq_ctx; cq->cq.cqe = cqe;
    pthread_mutex_init(&cq->lock, NULL);
    return &cq->cq;
}
int ibv_destroy_cq(struct ibv_cq *cq) { free(cq); return 0; }

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx) {
    struct ibv_cq *p;
    ssize_t n = read(ch->fd, &p, sizeof p);
    if (n != (ssize_t)sizeof p) return -1;
    *cq = p; *cq_ctx = p->cq_context;
    return 0;
}
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned n) { (void)cq; (void)n; }

static int req_notify_cq(struct ibv_cq *cq, int solicited) {
    (void)solicited;
    struct fake_cq *f = (struct fake_cq *)cq;
    pthread_mutex_lock(&f->lock);
    f->armed = 1;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    struct fake_cq *f = (struct fake_cq *)cq;
    int got = 0;
    int slow = env_int("FAKE_VERBS_SLOW_POLL_US", 0);
    if (slow > 0 && f->count > 0) { usleep((useconds_t)slow); n = 1; }
    pthread_mutex_lock(&f->lock);
    while (got < n && f->count > 0) {
        wc[got] = f->ring[f->head];
        struct fake_qp *q = (struct fake_qp *)f->owner[f->head];
        if (q && q->outstanding) q->outstanding--;
        f->head = (f->head + 1) % RING;
        f->count--;
        got++;
    }
    pthread_mutex_unlock(&f->lock);
    return got;
}

static void complete(struct fake_qp *q, uint64_t wr_id, int status, int opcode, uint32_t len) {
    struct fake_cq *f = (struct fake_cq *)q->qp.send_cq;
    int fire = 0;
    pthread_mutex_lock(&f->lock);
    if (f->count >= (unsigned)f->cq.cqe) {
        fprintf(stderr, "fake verbs: CQ overrun (cqe %d)\n", f->cq.cqe);
        pthread_mutex_unlock(&f->lock);
        return;
    }
    unsigned tail = (f->head + f->count) % RING;
    struct ibv_wc *w = &f->ring[tail];
    memset(w, 0, sizeof *w);
    w->wr_id = wr_id; w->status = status; w->opcode = opcode; w->byte_len = len;
    w->qp_num = q->qp.qp_num;
    f->owner[tail] = &q->qp;
    f->count++;
    if (f->armed && f->cq.channel) { f->armed = 0; fire = 1; }
    pthread_mutex_unlock(&f->lock);
    if (fire) {
        struct fake_chan *ch = (struct fake_chan *)f->cq.channel;
        struct ibv_cq *p = &f->cq;
        if (write(ch->wfd, &p, sizeof p) != (ssize_t)sizeof p) perror("fake verbs: event");
    }
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
    if (a->qp_type != 2 || !a->send_cq) { errno = EINVAL; return NULL; }
    pthread_mutex_lock(&g_lock);
    int slot = -1;
    for (int i = 0; i < MAX_QP; i++) if (!g_pub.qps[i].valid) { slot = i; break; }
    if (slot < 0) { pthread_mutex_unlock(&g_lock); errno = ENOMEM; return NULL; }
    struct fake_qp *q = calloc(1, sizeof *q);
    q->qp.context = pd->context; q->qp.pd = pd; q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq; q->qp.qp_context = a->qp_context; q->qp.qp_type = 2;
    q->qp.qp_num = g_next_qpn++;
    q->dev = ((struct fake_ctx *)pd->context)->dev;
    uint32_t cap = (uint32_t)env_int("FAKE_VERBS_MAX_WR", 0);
    q->max_wr = a->cap.max_send_wr;
    if (cap && cap < q->max_wr) q->max_wr = cap;
    if (!env_int("FAKE_VERBS_HIDE_CAP", 0)) a->cap.max_send_wr = q->max_wr;
    q->slot = slot;
    g_pub.qps[slot] = (struct pub_qp){q->qp.qp_num, QPS_RESET, 0, (uint32_t)q->dev, 1, 0};
    pthread_mutex_unlock(&g_lock);
    return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
    struct fake_qp *q = (struct fake_qp *)qp;
    if (!(mask & QP_STATE)) return EINVAL;
    int to = a->qp_state, from = q->state, need = 0;
    if (to == QPS_RESET || to == QPS_ERR) need = 0;
    else if (from == QPS_RESET && to == QPS_INIT) need = QP_PORT | QP_ACCESS_FLAGS | QP_PKEY_INDEX;
    else if (from == QPS_INIT && to == QPS_RTR)
        need = QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    else if (from == QPS_RTR && to == QPS_RTS)
        need = QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    else return EINVAL;
    if ((mask & need) != need) return EINVAL;
    if (to == QPS_INIT && a->port_num != 1) return EINVAL;
    if (to == QPS_RTR) {
        const uint8_t *g = a->ah_attr.grh.dgid.raw;
        if (!a->ah_attr.is_global || g[0] != 0xfe || g[2] != 'F' || a->path_mtu < 1 || a->path_mtu > 5)
            return EINVAL;
        q->dest_qpn = a->dest_qp_num;
        memcpy(&q->dest_pid, g + 4, 4);
        memcpy(&q->dest_pub, g + 8, 8);
        q->dest_dev = g[3];
    }
    pthread_mutex_lock(&g_lock);
    q->state = to;
    qp->state = to;
    g_pub.qps[q->slot].state = (uint32_t)to;
    if (to == QPS_RTR) g_pub.qps[q->slot].dest_qpn = q->dest_qpn;
    pthread_mutex_unlock(&g_lock);
    if (to == QPS_ERR) {
        /* Held work is flushed, in order. */
        struct fake_cq *f = (struct fake_cq *)q->qp.send_cq;
        pthread_mutex_lock(&f->lock);
        unsigned n = q->held;
        q->held = 0;
        pthread_mutex_unlock(&f->lock);
        for (unsigned i = 0; i < n; i++)
            complete(q, q->held_id[i], WC_WR_FLUSH_ERR,
                     q->held_op[i] == WR_RDMA_WRITE ? WC_OP_RDMA_WRITE : WC_OP_RDMA_READ, 0);
    }
    return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp) {
    struct fake_qp *q = (struct fake_qp *)qp;
    pthread_mutex_lock(&g_lock);
    memset(&g_pub.qps[q->slot], 0, sizeof g_pub.qps[0]);
    pthread_mutex_unlock(&g_lock);
    free(q);
    return 0;
}

static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    (void)qp;
    *bad = wr;
    return EINVAL; /* tidewire never posts receives */
}

/* Reads the peer's published table (own process: a locked copy). */
static int read_pub(struct fake_qp *q, struct pub_state *out) {
    if (q->dest_pid == (int32_t)getpid()) {
        pthread_mutex_lock(&g_lock);
        memcpy(out, &g_pub, sizeof *out);
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    struct iovec l = {out, sizeof *out}, r = {(void *)(uintptr_t)q->dest_pub, sizeof *out};
    ssize_t n = process_vm_readv(q->dest_pid, &l, 1, &r, 1, 0);
    return n == (ssize_t)sizeof *out && out->magic == MAGIC ? 0 : -1;
}

static int move_bytes(struct fake_qp *q, int opcode, uint64_t local, uint64_t remote, uint32_t len) {
    if (q->dest_pid == (int32_t)getpid()) {
        if (opcode == WR_RDMA_WRITE) memmove((void *)(uintptr_t)remote, (void *)(uintptr_t)local, len);
        else memmove((void *)(uintptr_t)local, (void *)(uintptr_t)remote, len);
        return 0;
    }
    struct iovec l = {(void *)(uintptr_t)local, len}, r = {(void *)(uintptr_t)remote, len};
    ssize_t n = opcode == WR_RDMA_WRITE ? process_vm_writev(q->dest_pid, &l, 1, &r, 1, 0)
                                        : process_vm_readv(q->dest_pid, &l, 1, &r, 1, 0);
    return n == (ssize_t)len ? 0 : -1;
}

static int execute(struct fake_qp *q, struct ibv_send_wr *wr, struct pub_state *peer) {
    if (wr->num_sge != 1 || !wr->sg_list) return WC_LOC_PROT_ERR;
    struct ibv_sge *s = wr->sg_list;
    /* Local key and range. */
    int ok = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_MR; i++) {
        struct pub_mr *m = &g_pub.mrs[i];
        if (m->valid && m->lkey == s->lkey && m->dev == (uint32_t)q->dev && s->addr >= m->addr &&
            s->addr + s->length <= m->addr + m->len &&
            (wr->opcode != WR_RDMA_READ || (m->access & ACCESS_LOCAL_WRITE))) { ok = 1; break; }
    }
    pthread_mutex_unlock(&g_lock);
    if (!ok) return WC_LOC_PROT_ERR;
    /* Injected failures. */
    const char *fail_dev = getenv("FAKE_VERBS_FAIL_DEV");
    int fail_every = env_int("FAKE_VERBS_FAIL_EVERY", 0);
    int fail_status = env_int("FAKE_VERBS_FAIL_STATUS", WC_RETRY_EXC_ERR);
    pthread_mutex_lock(&g_lock);
    uint64_t nth = ++g_posted;
    pthread_mutex_unlock(&g_lock);
    if (fail_dev && strcmp(fail_dev, g_devs[q->dev].name) == 0) return fail_status;
    if (fail_every > 0 && nth % (uint64_t)fail_every == 0) return fail_status;
    /* The responder: its queue pair must be connected back to us, its key must cover the range. */
    if (read_pub(q, peer) != 0) return WC_RETRY_EXC_ERR;
    int qp_ok = 0;
    for (int i = 0; i < MAX_QP; i++) {
        struct pub_qp *p = &peer->qps[i];
        if (p->valid && p->qpn == q->dest_qpn && (p->state == QPS_RTR || p->state == QPS_RTS) &&
            p->dest_qpn == q->qp.qp_num && p->dev == (uint32_t)q->dest_dev) { qp_ok = 1; break; }
    }
    if (!qp_ok) return WC_RETRY_EXC_ERR;
    uint32_t need = wr->opcode == WR_RDMA_WRITE ? ACCESS_REMOTE_WRITE : ACCESS_REMOTE_READ;
    uint64_t ra = wr->wr.rdma.remote_addr;
    for (int i = 0; i < MAX_MR; i++) {
        struct pub_mr *m = &peer->mrs[i];
        if (m->valid && m->rkey == wr->wr.rdma.rkey && m->dev == (uint32_t)q->dest_dev &&
            ra >= m->addr && ra + s->length <= m->addr + m->len && (m->access & need))
            return move_bytes(q, wr->opcode, s->addr, ra, s->length) == 0 ? WC_SUCCESS
                                                                           : WC_RETRY_EXC_ERR;
    }
    return WC_REM_ACCESS_ERR;
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    struct fake_qp *q = (struct fake_qp *)qp;
    static __thread struct pub_state *peer;
    if (!peer) peer = malloc(sizeof *peer);
    for (struct ibv_send_wr *next; wr; wr = next) {
        next = wr->next;
        if (wr->opcode != WR_RDMA_WRITE && wr->opcode != WR_RDMA_READ) { *bad = wr; return EINVAL; }
        if (q->state != QPS_RTS && q->state != QPS_ERR) { *bad = wr; return EINVAL; }
        struct fake_cq *f = (struct fake_cq *)q->qp.send_cq;
        pthread_mutex_lock(&f->lock);
        int full = q->outstanding >= q->max_wr;
        if (!full) q->outstanding++;
        pthread_mutex_unlock(&f->lock);
        if (full) {
            pthread_mutex_lock(&g_lock); g_stat_full++; pthread_mutex_unlock(&g_lock);
            *bad = wr;
            return ENOMEM;
        }
        if (q->state != QPS_ERR &&
            (__atomic_load_n(&g_hold, __ATOMIC_SEQ_CST) || env_int("FAKE_VERBS_HOLD", 0))) {
            pthread_mutex_lock(&f->lock);
            int room = q->held < MAX_HELD;
            if (room) { q->held_id[q->held] = wr->wr_id; q->held_op[q->held] = wr->opcode; q->held++; }
            else q->outstanding--;
            pthread_mutex_unlock(&f->lock);
            if (!room) { *bad = wr; return ENOMEM; }
            continue;
        }
        int status = q->state == QPS_ERR ? WC_WR_FLUSH_ERR : execute(q, wr, peer);
        if (status != WC_SUCCESS && q->state != QPS_ERR) {
            pthread_mutex_lock(&g_lock);
            q->state = QPS_ERR; qp->state = QPS_ERR; g_pub.qps[q->slot].state = QPS_ERR;
            pthread_mutex_unlock(&g_lock);
        }
        pthread_mutex_lock(&g_lock);
        if (status == WC_SUCCESS) g_stat_ok++; else g_stat_err++;
        pthread_mutex_unlock(&g_lock);
        complete(q, wr->wr_id, status, wr->opcode == WR_RDMA_WRITE ? WC_OP_RDMA_WRITE : WC_OP_RDMA_READ,
                 status == WC_SUCCESS ? wr->sg_list[0].length : 0);
    }
    return 0;
}

static const char *STATUS[] = {
    "success", "local length error", "local QP operation error", "local EE context operation error",
    "local protection error", "Work Request Flushed Error", "memory bind operation error",
    "bad response error", "local access error", "remote invalid request error",
    "remote access error", "remote operation error", "transport retry counter exceeded",
    "RNR retry counter exceeded"};
const char *ibv_wc_status_str(int status) {
    if (status >= 0 && status < (int)(sizeof STATUS / sizeof STATUS[0])) return STATUS[status];
    return "unknown";
}
