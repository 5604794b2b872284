/* The sampled draw in C: llama.cpp's top-k, top-p, min-p and temperature over
 * the tokens near the peak, and the pick (the method is _llama_draw.py's).
 *
 * numpy's float32 exp is scalar on a host without AVX-512 (about 2.5 ns an
 * element), so one softmax normaliser over Gemma 3's 262,144 logits cost more
 * than the rest of a token's work, and the dozen small numpy calls around it
 * another 0.1 ms. Here a token is one call: one pass over the vocabulary finds
 * the peak, the normaliser and the window near the peak together (eight-lane
 * GCC/Clang vector loops; on x86-64 with GCC an AVX2+FMA clone chosen when the
 * library loads), then the chain runs on the window's few hundred tokens. A flat
 * distribution's top-p nucleus holds tens of thousands (a base model free-running
 * at temperature 1): one histogram pass sizes its window, and only the bucket
 * where the mass crosses top-p is sorted.
 * hatch_build.py compiles this file; _draw_native.py loads it through ctypes,
 * and without it _llama_draw.py computes the same in numpy.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOT
#endif
/* Inlined into each clone, so compiled for its target (a plain static function
 * called from the AVX2 clone would be built for the baseline only). */
#define INLINE static inline __attribute__((always_inline))

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

#define BLOCK 256 /* a multiple of 64 */

INLINE v8f load8(const float *x) {
    v8f v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* exp(x) for x <= 0, relative error below 3e-7: x = k ln 2 + r with |r| <= ln 2 / 2
 * (ln 2 in two parts), then a degree-5 polynomial for exp(r) (a weighted
 * least-squares fit, 1.1e-7 in exact arithmetic) and 2^k from the exponent bits.
 * A result below 2^-126 (x under about -87, -inf included) is 0: against a sum
 * that holds exp(0) = 1 it is nothing measurable. k comes from the rounding
 * constant's own bits and the exponent is built in unsigned lanes, so any input
 * (x > 0 or +inf too, whose results scan discards) is defined behaviour. */
INLINE v8f exp_neg8(v8f x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    v8f t = x * 1.44269504088896341f + magic;
    v8f k = t - magic;
    v8f r = x - k * 0.693359375f;
    r = r + k * 2.12194440e-4f;
    v8f p = r * 0.008312525227665901f + 0.041890114545822144f;
    p = p * r + 0.16667114198207855f;
    p = p * r + 0.499992311000824f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    v8u e = (v8u)t - 0x4B400000u + 127u; /* k + 127, from t's mantissa */
    v8i normal = (v8i)e > 0;
    return (v8f)((v8i)(p * (v8f)(e << 23)) & normal);
}

INLINE float exp_neg1(float x) {
    v8f v = {x, 0, 0, 0, 0, 0, 0, 0};
    return exp_neg8(v)[0];
}

INLINE int any_lane(v8i mask) {
    v8i none = {0};
    return memcmp(&mask, &none, sizeof mask) != 0;
}

/* Append the ids of x[from..to) >= floor to ids at *count (room for all; no
 * branch: a flat row's blocks hit half their elements). */
INLINE void collect(const float *x, int64_t from, int64_t to, float floor, int32_t *ids,
                    int64_t *count) {
    int64_t c = *count;
    for (int64_t i = from; i < to; i++) {
        ids[c] = (int32_t)i;
        c += x[i] >= floor;
    }
    *count = c;
}

/* The ids of the elements >= floor, ascending, in ids (room for n); how many. */
INLINE int64_t window(const float *x, int64_t n, float floor, int32_t *ids) {
    int64_t count = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        /* One horizontal test per 64 elements: nearly every block holds no hit. */
        v8i hit = load8(x + i) >= floor;
        for (int j = 8; j < 64; j += 8) hit |= load8(x + i + j) >= floor;
        if (any_lane(hit)) collect(x, i, i + 64, floor, ids, &count);
    }
    collect(x, i, n, floor, ids, &count);
    return count;
}

INLINE v8f max8(v8f a, v8f b) {
    v8i first = a > b;
    return (v8f)(((v8i)a & first) | ((v8i)b & ~first));
}

/* The largest of x[0..n) (-inf for none). */
INLINE float peak_of(const float *x, int64_t n) {
    v8f a = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    v8f b = a;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v8f u = load8(x + i), v = load8(x + i + 8);
        a = max8(u, a);
        b = max8(v, b);
    }
    a = max8(a, b);
    float m = -INFINITY;
    for (int lane = 0; lane < 8; lane++) m = a[lane] > m ? a[lane] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* Append the ids of x[from..to) >= floor to ids at *count (room for all), and
 * whether any of them exceeds m. */
INLINE int collect_above(const float *x, int64_t from, int64_t to, float floor, float m,
                         int32_t *ids, int64_t *count) {
    int above = 0;
    int64_t c = *count;
    for (int64_t i = from; i < to; i++) { /* no branch: x[i] > m implies x[i] >= floor */
        ids[c] = (int32_t)i;
        c += x[i] >= floor;
        above |= x[i] > m;
    }
    *count = c;
    return above;
}

/* One pass over x: its peak (*peak), sum over i of exp((x[i] - peak) * scale), and
 * the ids of the elements >= (float)(peak - gap), ascending, in ids (room for n)
 * and *count. Each block is summed against the running peak m; an element above
 * m is also above m's floor, so the window's (rare, scalar) collection notices it,
 * and then the block is summed again against its own maximum, with the sum so far
 * rescaled to it (a handful of blocks in a vocabulary). Elements are collected
 * against the running peak's floor (lower, so a superset) and trimmed at the end. */
INLINE double scan(const float *x, int64_t n, float scale, double gap, int32_t *ids,
                   int64_t *count, float *peak) {
    float m = -INFINITY;
    double total = 0.0;
    *count = 0;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t end = i + BLOCK < n ? i + BLOCK : n;
        int64_t before = *count;
        if (m == -INFINITY) { /* the first block (or all -inf so far): start at its peak */
            m = peak_of(x + i, end - i);
            if (m == -INFINITY) continue;
        }
        for (;;) {
            float floor = (float)((double)m - gap);
            float bias = m * scale; /* (v - m) * scale as one fused step; exact at scale 1 */
            int above = 0;
            v8f part = {0};
            int64_t j = i;
            for (; j + 64 <= end; j += 64) {
                v8i hit = {0};
                for (int k = 0; k < 64; k += 8) {
                    v8f v = load8(x + j + k);
                    part += exp_neg8(v * scale - bias);
                    hit |= v >= floor;
                }
                if (any_lane(hit)) above |= collect_above(x, j, j + 64, floor, m, ids, count);
            }
            double rest = 0.0;
            for (int64_t k = j; k < end; k++) rest += exp_neg1((x[k] - m) * scale);
            above |= collect_above(x, j, end, floor, m, ids, count);
            if (!above) {
                for (int lane = 0; lane < 8; lane++) rest += part[lane];
                total += rest;
                break;
            }
            float top = peak_of(x + i, end - i);
            if (total > 0.0) total *= exp(((double)m - (double)top) * scale);
            m = top;
            *count = before;
        }
    }
    float floor = (float)((double)m - gap);
    int64_t kept = 0;
    for (int64_t i = 0; i < *count; i++)
        if (x[ids[i]] >= floor) ids[kept++] = ids[i];
    *count = kept;
    *peak = m;
    return total;
}

/* scan itself, for the tests (every draw starts with it): they hold its sum to a
 * float64 one and its window to numpy's. */
HOT double skulk_scan(const float *x, int64_t n, float scale, double gap, int32_t *ids,
                      int64_t *count, float *peak) {
    return scan(x, n, scale, gap, ids, count, peak);
}

/* What the chain keeps and how it looks for it (the gaps are nats below the peak;
 * see _llama_draw.py). */
typedef struct {
    int64_t top_k;        /* 0: off */
    double top_p;         /* 1: off */
    double min_p;         /* 0: off */
    double temperature;   /* > 0 */
    double first_gap;     /* the first window's reach */
    double widest_gap;    /* past it the window is the whole vocabulary */
    double sum_tolerance; /* the normaliser's relative error bound */
} chain_params;

typedef struct {
    float logit;
    int32_t id;
} candidate;

/* Descending logit, ties lower id first (a stable sort of ascending ids). */
static int by_logit(const void *a, const void *b) {
    const candidate *p = a, *q = b;
    if (p->logit != q->logit) return p->logit > q->logit ? -1 : 1;
    return (p->id > q->id) - (p->id < q->id);
}

INLINE int before(candidate a, candidate b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Reorders c[0..count) so its first k are the k that by_logit puts first (in no
 * particular order): Hoare's quickselect, linear on average, so a top-k over a
 * wide window (thousands of near-tied tokens) sorts only its k. */
INLINE void select_first(candidate *c, int64_t count, int64_t k) {
    int64_t lo = 0, hi = count - 1;
    while (lo < hi) {
        candidate a = c[lo], b = c[lo + (hi - lo) / 2], z = c[hi];
        candidate pivot = before(a, b) ? (before(b, z) ? b : (before(a, z) ? z : a))
                                       : (before(a, z) ? a : (before(b, z) ? z : b));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (before(c[i], pivot)) i++;
            while (before(pivot, c[j])) j--;
            if (i <= j) {
                candidate t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

INLINE int64_t everything(int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)i;
    return n;
}

/* w[i] = exp((c[i].logit - peak) * scale) (float, for logits <= peak, scale > 0);
 * returns their sum (in doubles). */
INLINE double weigh(const candidate *c, int64_t count, float peak, float scale, float *w) {
    double total = 0.0;
    float bias = peak * scale; /* exact at scale 1 */
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        v8f v;
        for (int lane = 0; lane < 8; lane++) v[lane] = c[i + lane].logit;
        v8f e = exp_neg8(v * scale - bias);
        memcpy(w + i, &e, sizeof e);
        for (int lane = 0; lane < 8; lane++) total += e[lane];
    }
    for (; i < count; i++) total += w[i] = exp_neg1((c[i].logit - peak) * scale);
    return total;
}

#define SMALL 128    /* at most this many candidates are simply sorted */
#define BUCKETS 2048 /* the cut's histogram of distances below the peak */

/* Which of BUCKETS a logit falls in, at inverse buckets a nat below the peak
 * (the last: any further, -inf too). */
INLINE int bucket(float logit, float peak, double inverse) {
    double at = ((double)peak - (double)logit) * inverse;
    return at < BUCKETS - 1 ? (int)at : BUCKETS - 1;
}

/* Top-p's cut of c[0..count): in by_logit order, up to and including the first
 * whose running mass exp(logit - peak) reaches target (all when none does).
 * Reorders c so that the cut comes first (in no particular order) and returns its
 * size. A few hundred candidates are sorted; more (a flat distribution's nucleus
 * holds tens of thousands) go into BUCKETS buckets by distance below the peak,
 * which by_logit order walks one after another, and only the bucket where the
 * mass crosses is sorted. Bucket masses are float sums (error below the
 * normaliser's tolerance); within the crossing bucket they are doubles, as for a
 * small set. w: weigh's weights of c at scale 1 (read only past SMALL). */
INLINE int64_t cut_top_p(candidate *c, int64_t count, float peak, double target,
                         const float *w) {
    double running = 0.0;
    int64_t from = 0, to = count;
    float low = peak;
    for (int64_t i = 0; i < count; i++)
        if (c[i].logit < low && c[i].logit > -INFINITY) low = c[i].logit;
    if (count > SMALL && low < peak) {
        double inverse = BUCKETS / ((double)peak - (double)low);
        double mass[BUCKETS] = {0};
        int last = 0;
        for (int64_t i = 0; i < count; i++) {
            int b = bucket(c[i].logit, peak, inverse);
            mass[b] += w[i];
            last = b > last ? b : last;
        }
        int hit = 0;
        while (hit < last && running + mass[hit] < target) running += mass[hit++];
        /* Those in buckets before hit to the front, hit's own next. */
        for (int64_t i = 0; i < count; i++) {
            if (bucket(c[i].logit, peak, inverse) < hit) {
                candidate t = c[from];
                c[from++] = c[i];
                c[i] = t;
            }
        }
        to = from;
        for (int64_t i = from; i < count; i++) {
            if (bucket(c[i].logit, peak, inverse) == hit) {
                candidate t = c[to];
                c[to++] = c[i];
                c[i] = t;
            }
        }
    }
    qsort(c + from, (size_t)(to - from), sizeof *c, by_logit);
    for (int64_t i = from; i < to; i++) {
        running += exp((double)c[i].logit - (double)peak);
        if (running >= target) return i + 1;
    }
    return to;
}

#define REACH_BUCKETS 1024

/* How far below the peak a window must reach to hold target of the mass
 * exp(x[i] - peak): from one pass's histogram of the mass by distance, in
 * REACH_BUCKETS buckets up to widest nats (a bucket more, for the histogram's
 * float terms); past widest, +inf. The window needed by top-p when the first one
 * falls short (a flat distribution), found in one pass instead of doubling. */
INLINE double reach(const float *x, int64_t n, float peak, double widest, double target) {
    /* Two histograms, so neighbouring adds do not wait on each other; a last
     * bucket each for everything further (-inf too) */
    double mass[2][REACH_BUCKETS + 1] = {{0}};
    float inverse = (float)(REACH_BUCKETS / widest);
    const v8f edge = {REACH_BUCKETS, REACH_BUCKETS, REACH_BUCKETS, REACH_BUCKETS,
                      REACH_BUCKETS, REACH_BUCKETS, REACH_BUCKETS, REACH_BUCKETS};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f v = load8(x + i);
        v8f e = exp_neg8(v - peak);
        v8f at = (peak - v) * inverse;
        v8i near = at < edge; /* false for NaN too */
        v8i b = (__builtin_convertvector(at, v8i) & near) | (((v8i){0} + REACH_BUCKETS) & ~near);
        for (int lane = 0; lane < 8; lane++) mass[lane & 1][b[lane]] += e[lane];
    }
    for (; i < n; i++) {
        float at = (peak - x[i]) * inverse;
        if (at < REACH_BUCKETS) mass[0][(int)at] += exp_neg1(x[i] - peak);
    }
    double running = 0.0;
    for (int b = 0; b < REACH_BUCKETS; b++) {
        running += mass[0][b] + mass[1][b];
        if (running >= target) return (b + 2) * widest / REACH_BUCKETS;
    }
    return INFINITY;
}

/* The set of tokens the chain keeps in work[0..count) (in no particular order),
 * and the peak logit; returns count, or 0 when the chain keeps the whole
 * vocabulary (no top-k, top-p or min-p). Scratch: ids (room for n), w (n floats). */
INLINE int64_t keep_set(const float *x, int64_t n, const chain_params *p, float *peak,
                        int32_t *ids, candidate *work, float *w) {
    int64_t count;
    int truncates_k = p->top_k > 0 && p->top_k < n;
    if (truncates_k) {
        *peak = peak_of(x, n);
        for (double gap = p->first_gap;; gap *= 2.0) {
            count = gap <= p->widest_gap ? window(x, n, (float)((double)*peak - gap), ids)
                                         : everything(ids, n);
            if (count >= p->top_k) break;
        }
        for (int64_t i = 0; i < count; i++) work[i] = (candidate){x[ids[i]], ids[i]};
        if (count > p->top_k) {
            select_first(work, count, p->top_k);
            count = p->top_k;
        }
        if (p->top_p < 1.0) {
            double total = 0.0; /* over the k, as llama.cpp's top-p after top-k */
            for (int64_t i = 0; i < count; i++) total += exp((double)work[i].logit - (double)*peak);
            if (count > SMALL) weigh(work, count, *peak, 1.0f, w);
            count = cut_top_p(work, count, *peak, p->top_p * total, w);
        }
    } else if (p->top_p < 1.0) {
        double total = scan(x, n, 1.0f, p->first_gap, ids, &count, peak);
        total *= 1.0 + p->sum_tolerance;
        for (double gap = p->first_gap;;) {
            for (int64_t i = 0; i < count; i++) work[i] = (candidate){x[ids[i]], ids[i]};
            if (weigh(work, count, *peak, 1.0f, w) >= p->top_p * total) break;
            /* Past the first window: the reach its histogram finds, then doubling
             * (should the histogram's float sums have fallen short). */
            double wider = gap == p->first_gap ? reach(x, n, *peak, p->widest_gap, p->top_p * total)
                                               : 0.0;
            gap = wider > gap ? wider : gap * 2.0;
            if (gap > p->widest_gap) {
                for (int64_t i = 0; i < n; i++) work[i] = (candidate){x[i], (int32_t)i};
                count = n;
                weigh(work, count, *peak, 1.0f, w);
                break;
            }
            count = window(x, n, (float)((double)*peak - gap), ids);
        }
        count = cut_top_p(work, count, *peak, p->top_p * total, w); /* w: the last weigh's */
    } else if (p->min_p > 0.0) {
        *peak = peak_of(x, n);
        count = window(x, n, (float)((double)*peak + log(p->min_p)), ids);
        for (int64_t i = 0; i < count; i++) work[i] = (candidate){x[ids[i]], ids[i]};
    } else {
        return 0;
    }
    if (p->min_p > 0.0 && count > 1) {
        float floor = (float)((double)*peak + log(p->min_p));
        int64_t kept = 0;
        for (int64_t i = 0; i < count; i++)
            if (work[i].logit >= floor) work[kept++] = work[i];
        if (kept == 0) { /* (a min_p above 1) the likeliest alone */
            select_first(work, count, 1);
            kept = 1;
        }
        count = kept;
    }
    return count;
}

/* The tokens the chain keeps, by descending logit, in ids, and their probabilities
 * at the temperature in probs (both with room for n); returns how many, or 0 when
 * the chain keeps the whole vocabulary (no top-k, top-p or min-p). Scratch: work,
 * room for n candidates. */
HOT int64_t skulk_chain(const float *x, int64_t n, const chain_params *p, int32_t *ids,
                        double *probs, candidate *work) {
    float peak;
    int64_t count = keep_set(x, n, p, &peak, ids, work, (float *)probs);
    qsort(work, (size_t)count, sizeof *work, by_logit);
    double total = 0.0;
    for (int64_t i = 0; i < count; i++) {
        ids[i] = work[i].id;
        probs[i] = exp(((double)work[i].logit - (double)peak) / p->temperature);
        total += probs[i];
    }
    for (int64_t i = 0; i < count; i++) probs[i] /= total;
    return count;
}

/* One token drawn from what the chain keeps, u uniform in [0, 1): the first whose
 * running probability passes u, in the kept set's own order (any fixed order
 * draws the same distribution; sorting a flat distribution's nucleus of tens of
 * thousands would cost more than the rest of the token). Over the whole vocabulary
 * (no truncation) the draw has two stages, the window near the peak (nearly all
 * the mass), else the rest, which is the same distribution. Scratch as
 * skulk_chain's. */
HOT int32_t skulk_draw(const float *x, int64_t n, const chain_params *p, double u, int32_t *ids,
                       double *probs, candidate *work) {
    float peak;
    float *w = (float *)probs;
    int64_t count = keep_set(x, n, p, &peak, ids, work, w);
    double inverse = 1.0 / p->temperature;
    if (count > 0) {
        double target = u * weigh(work, count, peak, (float)inverse, w);
        double running = 0.0;
        for (int64_t i = 0; i < count; i++) {
            running += w[i];
            if (running > target) return work[i].id;
        }
        return work[count - 1].id;
    }
    double gap = p->first_gap * p->temperature;
    double total = scan(x, n, (float)inverse, gap, ids, &count, &peak);
    if (count == 0) return 0; /* every logit -inf (or NaN): none likelier than another */
    double target = u * total;
    double running = 0.0;
    for (int64_t i = 0; i < count; i++) {
        probs[i] = running += exp(((double)x[ids[i]] - (double)peak) * inverse);
    }
    if (target < running || count == n) {
        for (int64_t i = 0; i < count; i++)
            if (probs[i] > target) return ids[i];
        return ids[count - 1];
    }
    /* The rare second stage (a high temperature puts mass far from the peak). */
    target -= running;
    running = 0.0;
    float floor = (float)((double)peak - gap);
    int32_t last = ids[count - 1];
    for (int64_t i = 0; i < n; i++) {
        if (x[i] < floor) {
            last = (int32_t)i;
            running += exp(((double)x[i] - (double)peak) * inverse);
            if (running > target) return last;
        }
    }
    return last;
}
