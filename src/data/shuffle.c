/* data: Hugging Face Dataset.shuffle(seed)'s order, numpy's Generator.permutation (see data.h).
 *
 * numpy 1.17+: default_rng(seed) is PCG64 (XSL-RR 128/64) seeded from SeedSequence(seed);
 * permutation(n) shuffles arange(n) from the last element down, each swap partner drawn by
 * rejection from the smallest all-ones mask above the bound (random_interval), with 32-bit
 * draws (two per 64-bit output, low half first) while the bound fits 32 bits. Checked
 * against numpy's own output (test_loader) and, end to end, check_loader.py. */
#include <stdint.h>

#include "data/data.h"

typedef unsigned __int128 u128;

typedef struct {
    u128 state, inc;
    int has32;
    uint32_t u32;
} pcg64;

/* SeedSequence's hashmix: the hash constant advances at each use. */
static uint32_t hashmix(uint32_t v, uint32_t *hc) {
    v ^= *hc;
    *hc *= 0x931e8875u;
    v *= *hc;
    return v ^ (v >> 16);
}

/* SeedSequence(seed).generate_state(4, uint64): the entropy's 32-bit words (least significant
 * first) hashed into a pool of 4 words, then drawn out as 8 words, paired little-endian. */
static void seed_sequence(uint64_t seed, uint64_t out[4]) {
    const uint32_t INIT_A = 0x43b0d7e5, INIT_B = 0x8b51f9dd, MULT_B = 0x58f38ded,
                   MIX_L = 0xca01f9dd, MIX_R = 0x4973f715;
    uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const int n_ent = seed >> 32 ? 2 : 1;
    uint32_t pool[4], hc = INIT_A;
    for (int i = 0; i < 4; i++) pool[i] = hashmix(i < n_ent ? ent[i] : 0u, &hc);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) {
                uint32_t r = MIX_L * pool[d] - MIX_R * hashmix(pool[s], &hc);
                pool[d] = r ^ (r >> 16);
            }
    uint32_t hb = INIT_B, w[8];
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4] ^ hb;
        hb *= MULT_B;
        v *= hb;
        w[i] = v ^ (v >> 16);
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
}

static const u128 k_mult = ((u128)0x2360ED051FC65DA4ULL << 64) | 0x4385DF649FCCF645ULL;

static void pcg_seed(pcg64 *g, uint64_t seed) {
    uint64_t v[4];
    seed_sequence(seed, v);
    const u128 s = (u128)v[0] << 64 | v[1], inc = (u128)v[2] << 64 | v[3];
    g->inc = inc << 1 | 1;
    g->state = g->inc; /* state 0, one step */
    g->state += s;
    g->state = g->state * k_mult + g->inc;
    g->has32 = 0;
}

static uint64_t pcg_next64(pcg64 *g) {
    g->state = g->state * k_mult + g->inc;
    const uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    const unsigned r = (unsigned)(g->state >> 122);
    return x >> r | x << ((64 - r) & 63);
}

static uint32_t pcg_next32(pcg64 *g) {
    if (g->has32) {
        g->has32 = 0;
        return g->u32;
    }
    const uint64_t n = pcg_next64(g);
    g->has32 = 1;
    g->u32 = (uint32_t)(n >> 32);
    return (uint32_t)n;
}

/* Uniform in [0, max]. */
static uint64_t pcg_interval(pcg64 *g, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
    if (max <= UINT32_MAX) {
        while ((v = pcg_next32(g) & mask) > max) {
        }
    } else {
        while ((v = pcg_next64(g) & mask) > max) {
        }
    }
    return v;
}

void data_shuffle_permutation(uint64_t seed, int64_t n, int64_t *perm) {
    pcg64 g;
    pcg_seed(&g, seed);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)pcg_interval(&g, (uint64_t)i);
        const int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
