/* The sampled draw's two passes over the vocabulary, in C (see _llama_draw.py).
 *
 * numpy's float32 exp is scalar on a host without AVX-512 (about 2.5 ns an
 * element), so one softmax normaliser over Gemma 3's 262,144 logits cost more
 * than the rest of a token's work, and selecting the tokens near the peak took
 * two more passes. These loops use GCC/Clang vector extensions (eight float
 * lanes) and, on x86-64 with GCC, an AVX2+FMA clone chosen when the library
 * loads. hatch_build.py compiles this file; _draw_native.py loads it through
 * ctypes, and without it the draw computes the same sums in numpy.
 */
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOT
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define BLOCK 256 /* a multiple of 64 */

static inline v8f load8(const float *x) {
    v8f v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* exp(x) for x <= 0, relative error below 3e-7: x = k ln 2 + r with |r| <= ln 2 / 2
 * (ln 2 in two parts), then a degree-5 polynomial for exp(r) (a weighted
 * least-squares fit, 1.1e-7 in exact arithmetic) and 2^k from the exponent bits.
 * A result below 2^-126 (x under about -87, -inf included) is 0: against a sum
 * that holds exp(0) = 1 it is nothing measurable. */
static inline v8f exp_neg8(v8f x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    v8f k = (x * 1.44269504088896341f + magic) - magic;
    v8f r = x - k * 0.693359375f;
    r = r + k * 2.12194440e-4f;
    v8f p = r * 0.008312525227665901f + 0.041890114545822144f;
    p = p * r + 0.16667114198207855f;
    p = p * r + 0.499992311000824f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    v8i e = __builtin_convertvector(k, v8i) + 127;
    v8i normal = e > 0;
    return (v8f)((v8i)(p * (v8f)(e << 23)) & normal);
}

static inline float exp_neg1(float x) {
    v8f v = {x, 0, 0, 0, 0, 0, 0, 0};
    return exp_neg8(v)[0];
}

static inline void collect(const float *x, int64_t from, int64_t to, float floor, int32_t *ids,
                           int64_t cap, int64_t *count) {
    for (int64_t i = from; i < to; i++) {
        if (x[i] >= floor) {
            if (*count < cap) ids[*count] = (int32_t)i;
            (*count)++;
        }
    }
}

static inline int any_lane(v8i mask) {
    v8i none = {0};
    return memcmp(&mask, &none, sizeof mask) != 0;
}

/* sum over i of exp((x[i] - shift) * scale), for shift >= every x[i] and scale > 0.
 * Eight float lanes add at most BLOCK / 8 terms each, and doubles add the blocks.
 * In the same pass the ids of the elements >= floor are written to ids (ascending,
 * at most cap of them) and counted in *count; ids NULL skips that. */
HOT double skulk_exp_sum(const float *x, int64_t n, float shift, float scale, float floor,
                         int32_t *ids, int64_t cap, int64_t *count) {
    double total = 0.0;
    int64_t i = 0;
    *count = 0;
    while (i + 64 <= n) {
        v8f part = {0};
        int64_t end = i + BLOCK < n ? i + BLOCK : n;
        for (; i + 64 <= end; i += 64) {
            v8i hit = {0};
            for (int j = 0; j < 64; j += 8) {
                v8f v = load8(x + i + j);
                part += exp_neg8((v - shift) * scale);
                hit |= v >= floor;
            }
            if (ids != NULL && any_lane(hit)) collect(x, i, i + 64, floor, ids, cap, count);
        }
        for (int lane = 0; lane < 8; lane++) total += part[lane];
    }
    for (int64_t j = i; j < n; j++) total += exp_neg1((x[j] - shift) * scale);
    if (ids != NULL) collect(x, i, n, floor, ids, cap, count);
    return total;
}

/* The ids of the elements >= floor, ascending; returns how many there are
 * (only the first cap are written). */
HOT int64_t skulk_window(const float *x, int64_t n, float floor, int32_t *ids, int64_t cap) {
    int64_t count = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        /* One horizontal test per 64 elements: nearly every block holds no hit. */
        v8i hit = load8(x + i) >= floor;
        for (int j = 8; j < 64; j += 8) hit |= load8(x + i + j) >= floor;
        if (any_lane(hit)) collect(x, i, i + 64, floor, ids, cap, &count);
    }
    collect(x, i, n, floor, ids, cap, &count);
    return count;
}
