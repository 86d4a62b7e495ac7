/* Kernel scratch kept between calls (cpu.h: ops_cpu_scratch_take / _give).
 *
 * Why: a kernel's large temporaries (attention's head-major operand copies, its dK / dV slices
 * and packed operands, grouped_mm's packed rows) are tens of MB, which glibc serves by mmap
 * (over its 32 MB threshold) or from a heap top it trims again after the free: a fresh buffer
 * per call was a page fault and a zeroed page every 4 KiB, every call (bench/RESULTS.md,
 * sessions 13 and 29: 20k faults a step at 30B-A3B-reduced's dims from attention's operand
 * copies alone). Slots keep their buffers (never freed: reachable, as a cache); a request takes
 * the smallest free slot that holds it, else grows a free slot (with a quarter of headroom, so
 * the next slightly larger request, a new routing's maximum, fits: the untouched tail costs
 * address space only, not memory), else, every slot busy, gets a buffer of its own that give
 * frees. */
#include <pthread.h>

#include "ops/cpu/cpu.h"

#define SCRATCH_SLOTS 16

static struct {
    void *p;
    size_t bytes;
    int busy;
} g_slot[SCRATCH_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void *alloc64(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* NULL when out of memory */
void *ops_cpu_scratch_try(size_t bytes) {
    if (!bytes) bytes = 1; /* an empty slot (no buffer, 0 bytes) never fits */
    pthread_mutex_lock(&g_lock);
    int fit = -1, grow = -1;
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        if (g_slot[i].busy) continue;
        if (g_slot[i].bytes >= bytes) {
            if (fit < 0 || g_slot[i].bytes < g_slot[fit].bytes) fit = i;
        } else if (grow < 0 || g_slot[i].bytes > g_slot[grow].bytes) {
            grow = i; /* the largest of those too small: its pages are given back for more */
        }
    }
    if (fit < 0 && grow >= 0) {
        free(g_slot[grow].p);
        const size_t room = bytes + bytes / 4;
        g_slot[grow].p = alloc64(room);
        g_slot[grow].bytes = g_slot[grow].p ? room : 0;
        fit = g_slot[grow].p ? grow : -1;
    }
    void *p = NULL;
    if (fit >= 0) {
        g_slot[fit].busy = 1;
        p = g_slot[fit].p;
    }
    pthread_mutex_unlock(&g_lock);
    return p ? p : alloc64(bytes);
}

void *ops_cpu_scratch_take(const char *what, size_t bytes) {
    void *p = ops_cpu_scratch_try(bytes);
    return p ? p : ops_cpu_alloc(what, bytes); /* out of memory: says so, fatal */
}

void ops_cpu_scratch_give(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    int i = 0;
    while (i < SCRATCH_SLOTS && g_slot[i].p != p) i++;
    if (i < SCRATCH_SLOTS) g_slot[i].busy = 0;
    pthread_mutex_unlock(&g_lock);
    if (i == SCRATCH_SLOTS) free(p); /* a buffer of its own: every slot was busy */
}
