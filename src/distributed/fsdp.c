/* dist: FSDP (ZeRO-3) over a flat parameter buffer split into units (see dist.h). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "distributed/internal.h"
#include "ops/ops.h"

/* One part of every unit, sharded over its own group: the dense part (elements
 * [0, numel - local)) over dp_shard, the expert part ([numel - local, numel)) over efsdp. */
enum { PART_DENSE, PART_EXPERT, N_PARTS };
typedef struct {
    dist_comm *comm;
    int P, me;        /* the group's ranks, this rank's index among them */
    size_t *S;        /* [n] shard length of the part of each unit: ceil(len / P) */
    int *cnt, *displ; /* [n * P] elements rank r owns of the part, and where they start in it */
    /* [n * P] bf16 transport, mixed parts: the exact elements in rank r's piece, and where
     * they start among the part's exact elements (in buffer order) */
    int *xcnt, *xdispl;
} fsdp_part;

/* How part k of unit u travels (index u * N_PARTS + k) under bf16 transport: all fp32, all
 * bf16, or bf16 with its exact elements gathered again in fp32 and written over them. */
enum { MOVE_F32, MOVE_BF16, MOVE_MIXED };

/* The buffers of one part's gather in flight (bf16 transport; NULL otherwise): the shard
 * rounded [cnt_me] and the part [len] as bf16 (h_recv in the caller's w16 when it has one:
 * not ours to free), the exact elements of the shard [xcnt_me] and of the part [xlen]. */
typedef struct {
    uint16_t *h_send, *h_recv;
    float *x_send, *x_recv;
    int h_in_w16;
} fsdp_buf;

struct dist_fsdp {
    dist_comm *rep;
    int n, P; /* units, dp_shard ranks */
    fsdp_part part[N_PARTS];
    dist_unit *units;
    size_t *S;    /* [n] shard length of each unit: the parts' together */
    size_t *soff; /* [n] where each unit's shard starts in the shard vector */
    size_t n_floats, shard_len, max_S;
    float *w, *g;     /* full (virtual) buffers [n_floats] */
    size_t map_bytes; /* > 0: w and g are our mappings */
    float *ws, *gs;   /* the shard vectors [shard_len] (P = 1: w and g themselves) */
    float *tmp;       /* [max_S] reduce-scatter result */
    /* [n] 0: released; GOT_ROUNDED: gathered under bf16 transport; GOT_EXACT: all fp32 */
    unsigned char *gathered;
    unsigned char *pending; /* [n] what the gathers in flight of a unit will leave */
    /* [n] the DIST_W16_* mask of the gathers in flight of a unit: the parts they receive into
     * w16 (dist_fsdp_cfg.w16) */
    unsigned char *pending16;
    /* [n] P > 1, a step begun with set_to_none: the unit's shard gradients not written yet
     * this step (its first reduce stores them, the later ones add) */
    unsigned char *gs_fresh;
    dist_req *req;  /* [n * N_PARTS] the gathers in flight */
    dist_req *xreq; /* [n * N_PARTS] their exact elements' gathers (mixed parts) */
    /* bf16 transport: exact[n_exact] the spans that stay fp32; move, xlen [n * N_PARTS] how
     * each part travels and its exact elements; buf [n * N_PARTS] the buffers in flight */
    int gather_bf16;
    uint16_t *w16;
    dist_span *exact;
    int n_exact;
    unsigned char *move;
    size_t *xlen;
    fsdp_buf *buf;
    dist_reshard reshard;
    int head, pinned;
    dist_range *ranges;
    int n_ranges;
    size_t page;
    dist_fsdp_stats st;
};

enum { GOT_ROUNDED = 1, GOT_EXACT = 2 };

static void add_range(dist_fsdp *f, size_t shard_off, size_t global_off, size_t len) {
    dist_range *prev = f->n_ranges ? &f->ranges[f->n_ranges - 1] : NULL;
    if (!len) return;
    if (prev && prev->shard_off + prev->len == shard_off &&
        prev->global_off + prev->len == global_off)
        prev->len += len;
    else
        f->ranges[f->n_ranges++] = (dist_range){shard_off, global_off, len};
}

/* Part k of unit x: its length and where it starts in the unit. */
static size_t part_len(const dist_unit *x, int k) {
    return k == PART_DENSE ? x->numel - x->local : x->local;
}
static size_t part_at(const dist_unit *x, int k) {
    return k == PART_DENSE ? 0 : x->numel - x->local;
}
/* Where part k of unit u starts in the shard vector. */
static size_t part_soff(const dist_fsdp *f, int u, int k) {
    return f->soff[u] + (k == PART_DENSE ? 0 : f->part[PART_DENSE].S[u]);
}

/* The exact elements of the flat range [lo, hi), in order: counted (packed NULL), copied
 * from at[g - lo] into packed[0 ..] (pack = 1), or from packed back to at (pack = 0).
 * Returns how many. */
static size_t exact_copy(const dist_fsdp *f, size_t lo, size_t hi, float *packed, float *at,
                         int pack) {
    size_t n = 0;
    for (int i = 0; i < f->n_exact && f->exact[i].offset < hi; i++) {
        const size_t a = f->exact[i].offset > lo ? f->exact[i].offset : lo,
                     e = f->exact[i].offset + f->exact[i].len, b = e < hi ? e : hi;
        if (a >= b) continue;
        if (packed && pack)
            memcpy(packed + n, at + (a - lo), (b - a) * sizeof(float));
        else if (packed)
            memcpy(at + (a - lo), packed + n, (b - a) * sizeof(float));
        n += b - a;
    }
    return n;
}

/* How a part of len elements, xl of them exact, travels: a mixed part costs 2 bytes an
 * element plus 4 per exact one, so fp32 from half exact on. */
static int move_of(size_t len, size_t xl, int bf16) {
    return !bf16 || 2 * xl >= len ? MOVE_F32 : xl ? MOVE_MIXED : MOVE_BF16;
}

double dist_fsdp_part_bytes(size_t len, size_t exact, int bf16, double *bf16_bytes,
                            int *collectives) {
    const int move = move_of(len, exact, bf16);
    const double h = move == MOVE_F32 ? 0 : 2.0 * (double)len;
    if (bf16_bytes) *bf16_bytes = h;
    if (collectives) *collectives = move == MOVE_MIXED ? 2 : 1;
    return move == MOVE_F32 ? 4.0 * (double)len
                            : h + (move == MOVE_MIXED ? 4.0 * (double)exact : 0);
}

/* bf16 transport: how each part travels, and its ranks' exact elements (mixed parts). */
static int plan_moves(dist_fsdp *f, const dist_fsdp_cfg *c, base_err *err) {
    const size_t n = (size_t)f->n;
    f->gather_bf16 = c->gather_bf16;
    f->w16 = c->gather_bf16 ? c->w16 : NULL;
    f->n_exact = c->n_exact;
    f->exact = calloc((size_t)c->n_exact + 1, sizeof *f->exact);
    f->move = calloc(n * N_PARTS, 1);
    f->xlen = calloc(n * N_PARTS, sizeof *f->xlen);
    f->buf = calloc(n * N_PARTS, sizeof *f->buf);
    if (!f->exact || !f->move || !f->xlen || !f->buf) return base_fail(err, "out of memory");
    for (int i = 0; i < c->n_exact; i++) {
        f->exact[i] = c->exact[i];
        if (c->exact[i].offset + c->exact[i].len > c->n_floats ||
            (i && c->exact[i].offset < c->exact[i - 1].offset + c->exact[i - 1].len))
            return base_fail(err,
                             "fsdp: exact span %d ([%zu, +%zu)) must lie in the buffer after "
                             "the previous one",
                             i, c->exact[i].offset, c->exact[i].len);
    }
    for (int u = 0; u < f->n; u++) {
        const dist_unit *x = &f->units[u];
        for (int k = 0; k < N_PARTS; k++) {
            const fsdp_part *q = &f->part[k];
            const size_t i = (size_t)u * N_PARTS + (size_t)k, len = part_len(x, k),
                         lo = x->offset + part_at(x, k), P = (size_t)q->P;
            const size_t xl = exact_copy(f, lo, lo + len, NULL, NULL, 0);
            f->xlen[i] = xl;
            f->move[i] = (unsigned char)move_of(len, xl, f->gather_bf16 && P > 1);
            int at = 0;
            for (size_t r = 0; r < P; r++) {
                const size_t j = (size_t)u * P + r, a = lo + (size_t)q->displ[j];
                q->xcnt[j] = (int)exact_copy(f, a, a + (size_t)q->cnt[j], NULL, NULL, 0);
                q->xdispl[j] = at;
                at += q->xcnt[j];
            }
        }
    }
    return 0;
}

int dist_fsdp_new(dist_fsdp **out, const dist_mesh *mesh, const dist_fsdp_cfg *c, base_err *err) {
    *out = NULL;
    dist_fsdp *f = calloc(1, sizeof *f);
    if (!f) return base_fail(err, "out of memory");
    f->rep = mesh->replicate_comm;
    f->n = c->n_units;
    f->P = mesh->dp_shard;
    f->n_floats = c->n_floats;
    f->reshard = c->reshard;
    f->head = c->head_unit;
    f->pinned = c->pinned_unit;
    f->page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t n = (size_t)f->n;
    f->part[PART_DENSE] =
        (fsdp_part){.comm = mesh->shard_comm, .P = mesh->dp_shard, .me = mesh->shard_rank};
    f->part[PART_EXPERT] =
        (fsdp_part){.comm = mesh->efsdp_comm, .P = mesh->efsdp, .me = mesh->efsdp_rank};
    int oom = 0;
    for (int k = 0; k < N_PARTS; k++) {
        fsdp_part *q = &f->part[k];
        q->S = calloc(n, sizeof *q->S);
        q->cnt = calloc(n * (size_t)q->P, sizeof *q->cnt);
        q->displ = calloc(n * (size_t)q->P, sizeof *q->displ);
        q->xcnt = calloc(n * (size_t)q->P, sizeof *q->xcnt);
        q->xdispl = calloc(n * (size_t)q->P, sizeof *q->xdispl);
        oom |= !q->S || !q->cnt || !q->displ || !q->xcnt || !q->xdispl;
    }
    f->units = calloc(n, sizeof *f->units);
    f->S = calloc(n, sizeof *f->S);
    f->soff = calloc(n, sizeof *f->soff);
    f->gathered = calloc(n, 1);
    f->pending = calloc(n, 1);
    f->pending16 = calloc(n, 1);
    f->gs_fresh = calloc(n, 1);
    f->req = calloc(n * N_PARTS, sizeof *f->req);
    f->xreq = calloc(n * N_PARTS, sizeof *f->xreq);
    f->ranges = calloc(N_PARTS * n, sizeof *f->ranges);
    if (oom || !f->units || !f->S || !f->soff || !f->gathered || !f->pending || !f->pending16 ||
        !f->gs_fresh || !f->req || !f->xreq || !f->ranges) {
        dist_fsdp_free(f);
        return base_fail(err, "out of memory");
    }
    size_t at = 0;
    for (size_t u = 0; u < n; u++) {
        const dist_unit *x = &c->units[u];
        if (x->offset != at || x->numel > INT_MAX || x->local > x->numel) {
            dist_fsdp_free(f);
            return base_fail(err,
                             "fsdp: unit %zu ([%zu, +%zu)) must follow the previous one and hold "
                             "at most 2^31 elements (its local part inside it)",
                             u, x->offset, x->numel);
        }
        at += x->numel;
        f->units[u] = *x;
        f->soff[u] = f->shard_len;
        for (int k = 0; k < N_PARTS; k++) {
            fsdp_part *q = &f->part[k];
            const size_t P = (size_t)q->P, len = part_len(x, k), S = (len + P - 1) / P;
            q->S[u] = S;
            if (S > f->max_S) f->max_S = S;
            for (size_t r = 0; r < P; r++) {
                const size_t lo = r * S < len ? r * S : len, hi = lo + S < len ? lo + S : len;
                q->cnt[u * P + r] = (int)(hi - lo);
                q->displ[u * P + r] = (int)lo;
            }
            /* this rank's piece of the part, merged with the previous one when both sides
             * are adjacent */
            add_range(f, f->soff[u] + f->S[u], x->offset + part_at(x, k) + (size_t)q->me * S,
                      (size_t)q->cnt[u * P + (size_t)q->me]);
            f->S[u] += S;
        }
        f->shard_len += f->S[u];
    }
    if (at != c->n_floats) {
        dist_fsdp_free(f);
        return base_fail(err, "fsdp: the units cover %zu of %zu elements", at, c->n_floats);
    }
    if (plan_moves(f, c, err)) {
        dist_fsdp_free(f);
        return -1;
    }
    if (f->P == 1) { /* the shard is the whole buffer: the model's own */
        f->w = f->ws = c->w;
        f->g = f->gs = c->g;
        *out = f;
        return 0;
    }
    f->map_bytes = (c->n_floats * sizeof(float) + f->page - 1) / f->page * f->page;
    /* untouched anonymous pages cost nothing until a unit is gathered into them */
    void *w = mmap(NULL, f->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *g = mmap(NULL, f->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    f->w = w == MAP_FAILED ? NULL : w;
    f->g = g == MAP_FAILED ? NULL : g;
    f->ws = base_alloc(f->shard_len * sizeof(float));
    f->gs = base_alloc(f->shard_len * sizeof(float));
    f->tmp = base_alloc(f->max_S * sizeof(float));
    if (!f->w || !f->g || !f->ws || !f->gs || !f->tmp) {
        dist_fsdp_free(f);
        return base_fail(err, "out of memory: FSDP buffers for %zu parameters", c->n_floats);
    }
    *out = f;
    return 0;
}

void dist_fsdp_free(dist_fsdp *f) {
    if (!f) return;
    if (f->P > 1) {
        dist_fsdp_release_all(f);
        if (f->w) munmap(f->w, f->map_bytes);
        if (f->g) munmap(f->g, f->map_bytes);
        base_free(f->ws);
        base_free(f->gs);
    }
    base_free(f->tmp);
    for (int k = 0; k < N_PARTS; k++) {
        free(f->part[k].S);
        free(f->part[k].cnt);
        free(f->part[k].displ);
        free(f->part[k].xcnt);
        free(f->part[k].xdispl);
    }
    free(f->units);
    free(f->S);
    free(f->soff);
    free(f->gathered);
    free(f->pending);
    free(f->pending16);
    free(f->gs_fresh);
    free(f->req);
    free(f->xreq);
    free(f->exact);
    free(f->move);
    free(f->xlen);
    free(f->buf);
    free(f->ranges);
    free(f);
}

float *dist_fsdp_full_params(const dist_fsdp *f) {
    return f->w;
}
float *dist_fsdp_full_grads(const dist_fsdp *f) {
    return f->g;
}
float *dist_fsdp_shard_params(const dist_fsdp *f) {
    return f->ws;
}
float *dist_fsdp_shard_grads(const dist_fsdp *f) {
    return f->gs;
}
size_t dist_fsdp_shard_len(const dist_fsdp *f) {
    return f->shard_len;
}
const dist_range *dist_fsdp_ranges(const dist_fsdp *f, int *n) {
    *n = f->n_ranges;
    return f->ranges;
}

int dist_fsdp_unit_of(const dist_fsdp *f, size_t i) {
    for (int u = 0; u < f->n; u++)
        if (i < f->soff[u] + f->S[u]) return u;
    return f->n - 1;
}

/* Returns the pages of base[off, off + n) to the system (they read as zeros afterwards).
 * Only whole pages inside the range: its first and last page may hold a neighbour unit.
 * zero: the partial pages at the edges are zeroed too (gradients must read as zero). */
static void drop(const dist_fsdp *f, float *base, size_t off, size_t n, int zero) {
    char *lo = (char *)(base + off), *hi = (char *)(base + off + n);
    char *a = (char *)(((uintptr_t)lo + f->page - 1) & ~(uintptr_t)(f->page - 1));
    char *b = (char *)((uintptr_t)hi & ~(uintptr_t)(f->page - 1));
    if (a >= b) {
        if (zero) memset(lo, 0, (size_t)(hi - lo));
        return;
    }
    if (zero) {
        memset(lo, 0, (size_t)(a - lo));
        memset(b, 0, (size_t)(hi - b));
    }
    base_release_pages(a, (size_t)(b - a));
}

static int in_flight(const dist_fsdp *f, int u) {
    for (int k = 0; k < N_PARTS; k++)
        if (f->req[u * N_PARTS + k].active || f->xreq[u * N_PARTS + k].active) return 1;
    return 0;
}

/* Waits for unit u's gathers; use: expand what came as bf16 into the full buffer and write
 * the exact elements over it (else the buffers are only freed: the unit is being dropped). */
static void wait_gather(dist_fsdp *f, int u, int use) {
    const dist_unit *x = &f->units[u];
    for (int k = 0; k < N_PARTS; k++) {
        const size_t i = (size_t)u * N_PARTS + (size_t)k, len = part_len(x, k),
                     lo = x->offset + part_at(x, k);
        f->st.gather_s += dist_wait(&f->req[i]) + dist_wait(&f->xreq[i]);
        fsdp_buf *b = &f->buf[i];
        if (!b->h_recv) continue;
        if (use) {
            ops_bf16_to_f32(f->w + lo, b->h_recv, len);
            if (b->x_recv) exact_copy(f, lo, lo + len, b->x_recv, f->w + lo, 0);
        }
        base_free(b->h_send);
        if (!b->h_in_w16) base_free(b->h_recv);
        base_free(b->x_send);
        base_free(b->x_recv);
        *b = (fsdp_buf){0};
    }
}

/* Starts the all-gather of each part of unit u over its group (a copy in a one-rank group:
 * the experts whole here under ep = dp_shard); exact: fp32 whatever the transport. */
static void start_gather(dist_fsdp *f, int u, int exact) {
    if (f->gathered[u] || in_flight(f, u)) return;
    const dist_unit *x = &f->units[u];
    int rounded = 0, in16 = 0;
    for (int k = 0; k < N_PARTS; k++) {
        const fsdp_part *q = &f->part[k];
        const size_t len = part_len(x, k), at = (size_t)u * (size_t)q->P,
                     i = (size_t)u * N_PARTS + (size_t)k, me = at + (size_t)q->me,
                     lo = x->offset + part_at(x, k);
        const int bit = k == PART_DENSE ? DIST_W16_DENSE : DIST_W16_LOCAL;
        if (!len) {
            in16 |= bit; /* nothing to receive */
            continue;
        }
        float *dst = f->w + lo;
        const float *src = f->ws + part_soff(f, u, k);
        const int move = exact ? MOVE_F32 : f->move[i];
        if (move == MOVE_F32) {
            dist_iallgatherv(q->comm, src, dst, q->cnt + at, q->displ + at, sizeof(float),
                             &f->req[i]);
            if (q->P > 1) f->st.gather_bytes += (double)len * sizeof(float);
            continue;
        }
        rounded = 1;
        fsdp_buf *b = &f->buf[i];
        const size_t mine = (size_t)q->cnt[me], xl = f->xlen[i];
        b->h_send = base_alloc_uninit((mine ? mine : 1) * sizeof(uint16_t));
        b->h_in_w16 = f->w16 != NULL;
        b->h_recv = b->h_in_w16 ? f->w16 + lo : base_alloc_uninit(len * sizeof(uint16_t));
        if (b->h_in_w16) in16 |= bit;
        if (move == MOVE_MIXED) {
            b->x_send = base_alloc_uninit(((size_t)q->xcnt[me] + 1) * sizeof(float));
            b->x_recv = base_alloc_uninit(xl * sizeof(float));
        }
        if (!b->h_send || !b->h_recv || (move == MOVE_MIXED && (!b->x_send || !b->x_recv))) {
            base_log(BASE_LOG_ERROR, "fsdp: out of memory for the bf16 all-gather of unit %d", u);
            dist_abort(1);
        }
        ops_bf16_from_f32(b->h_send, src, mine);
        dist_iallgatherv(q->comm, b->h_send, b->h_recv, q->cnt + at, q->displ + at,
                         sizeof(uint16_t), &f->req[i]);
        f->st.gather_bytes += (double)len * sizeof(uint16_t);
        f->st.gather_bf16_bytes += (double)len * sizeof(uint16_t);
        if (move == MOVE_MIXED) {
            const size_t a = lo + (size_t)q->displ[me];
            exact_copy(f, a, a + mine, b->x_send, (float *)src, 1);
            dist_iallgatherv(q->comm, b->x_send, b->x_recv, q->xcnt + at, q->xdispl + at,
                             sizeof(float), &f->xreq[i]);
            f->st.gather_bytes += (double)xl * sizeof(float);
        }
    }
    f->pending[u] = rounded ? GOT_ROUNDED : GOT_EXACT;
    f->pending16[u] = (unsigned char)(rounded && f->w16 ? in16 : 0);
    f->st.gathers++;
}

/* Unit u's parameters complete in the full buffer. Returns the DIST_W16_* mask of what a
 * gather completed by this call received into w16 (0 when the unit was gathered already). */
static int ensure(dist_fsdp *f, int u) {
    start_gather(f, u, 0);
    const int fresh = !f->gathered[u];
    wait_gather(f, u, 1);
    if (!fresh) return 0;
    f->gathered[u] = f->pending[u];
    return f->pending16[u];
}

static void release_params(dist_fsdp *f, int u) {
    wait_gather(f, u, 0);
    if (!f->gathered[u]) return;
    drop(f, f->w, f->units[u].offset, f->units[u].numel, 0);
    f->gathered[u] = 0;
}

/* Sums each part of unit u's gradients over its group into this rank's shard (a copy in a
 * one-rank group: under ep = dp_shard the expert owner served all its tokens; stored over the
 * shard, not added, the first time in a step begun with set_to_none), then zeroes them. */
static void reduce(dist_fsdp *f, int u) {
    const dist_unit *x = &f->units[u];
    for (int k = 0; k < N_PARTS; k++) {
        const fsdp_part *q = &f->part[k];
        const size_t len = part_len(x, k);
        if (!len) continue;
        const int *cnt = q->cnt + (size_t)u * (size_t)q->P;
        f->st.reduce_s +=
            dist_reduce_scatter_f32(q->comm, f->g + x->offset + part_at(x, k), f->tmp, cnt);
        if (q->P > 1) f->st.reduce_bytes += (double)len * sizeof(float);
        float *gs = f->gs + part_soff(f, u, k);
        const int nk = cnt[q->me];
        if (f->gs_fresh[u]) {
            memcpy(gs, f->tmp, sizeof(float) * (size_t)nk);
            continue;
        }
#pragma omp parallel for schedule(static)
        for (int i = 0; i < nk; i++) gs[i] += f->tmp[i];
    }
    f->gs_fresh[u] = 0;
    f->st.reduces++;
    drop(f, f->g, x->offset, x->numel, 1);
}

static int release_after_forward(const dist_fsdp *f, int u) {
    if (u == f->pinned || f->reshard == DIST_RESHARD_NEVER) return 0;
    return f->reshard == DIST_RESHARD_ALWAYS || u != f->head;
}

int dist_fsdp_hook(dist_fsdp *f, int u, dist_phase p) {
    if (f->P == 1) return 0;
    int in16 = 0;
    switch (p) {
    case DIST_FWD_BEGIN:
        in16 = ensure(f, u);
        if (u + 1 < f->n) start_gather(f, u + 1, 0); /* prefetch while u computes */
        break;
    case DIST_FWD_END:
        if (release_after_forward(f, u)) release_params(f, u);
        break;
    case DIST_BWD_BEGIN: /* a backward without parameters gets none (nor a prefetch) */
        if (!f->units[u].bwd_without_params) in16 = ensure(f, u);
        if (u > 0 && !f->units[u - 1].bwd_without_params) start_gather(f, u - 1, 0);
        break;
    case DIST_BWD_END:
        reduce(f, u);
        release_params(f, u);
        break;
    }
    return in16;
}

void dist_fsdp_release_all(dist_fsdp *f) {
    if (f->P == 1) return;
    for (int u = 0; u < f->n; u++) release_params(f, u);
}

void dist_fsdp_begin_step(dist_fsdp *f, int set_to_none) {
    if (!set_to_none)
        ops_zero(f->gs, f->shard_len);
    else if (f->P > 1) /* each unit's first reduce stores its shard */
        memset(f->gs_fresh, 1, (size_t)f->n);
    /* (P = 1: the shard is the model's gradient buffer, which its backward writes) */
    dist_fsdp_release_all(f);
}

int dist_fsdp_drops_grads(const dist_fsdp *f) {
    return f->P > 1;
}

void dist_fsdp_store_unit(dist_fsdp *f, int u) {
    if (f->P == 1) return;
    const dist_unit *x = &f->units[u];
    for (int k = 0; k < N_PARTS; k++) {
        const fsdp_part *q = &f->part[k];
        const size_t S = q->S[u], nk = (size_t)q->cnt[(size_t)u * (size_t)q->P + (size_t)q->me];
        memcpy(f->ws + part_soff(f, u, k), f->w + x->offset + part_at(x, k) + (size_t)q->me * S,
               nk * sizeof(float));
    }
    f->gathered[u] = GOT_EXACT; /* whatever is there goes */
    release_params(f, u);
}

void dist_fsdp_gather_all(dist_fsdp *f) {
    if (f->P == 1) return;
    for (int u = 0; u < f->n; u++) { /* rounded units (gathered or in flight) again, exact */
        if (f->gathered[u] == GOT_ROUNDED || (in_flight(f, u) && f->pending[u] == GOT_ROUNDED))
            release_params(f, u);
        start_gather(f, u, 1);
    }
    for (int u = 0; u < f->n; u++) ensure(f, u);
}

void dist_fsdp_sync_replicas(dist_fsdp *f) {
    if (dist_comm_size(f->rep) == 1) return;
    const double t0 = base_now();
    dist_allreduce_f32(f->rep, f->gs, f->shard_len);
    f->st.allreduce_s += base_now() - t0;
    f->st.allreduce_bytes += (double)f->shard_len * sizeof(float);
}

void dist_fsdp_get_stats(const dist_fsdp *f, dist_fsdp_stats *s) {
    *s = f->st;
}
