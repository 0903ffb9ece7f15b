/* A switch interpreter for workload A in C: the peer of tapejit's replay that issue 19
 * measures against ("about 152 us here, gcc -O3" for 10,000 ops).
 *
 * One record per source-level op of the scalar graph (tapejit/demo.py), four int32 fields
 * each after the opcode: softplus, the 4-term Python sum, the product, and the 4-way softmax
 * of stacked scalars that writes its four results to consecutive slots.  Values and
 * adjoints are flat double arrays indexed by node number (inputs first).  bench/c_interpreter.py
 * builds the records, compiles this file with the system C compiler and calls ``run``.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { SOFTPLUS = 0, SUM4 = 1, MUL = 2, SOFTMAX4 = 3 };

/* record r: rec[6 r .. 6 r + 5] = op, out, a, b, c, d (unused fields are 0) */
double run(const int32_t *rec, int32_t n, double *v, double *g, int32_t slots,
           const double *x, int32_t inputs, int32_t root)
{
    memcpy(v, x, sizeof(double) * (size_t)inputs);
    for (int32_t r = 0; r < n; r++) {
        const int32_t *f = rec + 6 * r;
        int32_t out = f[1];
        switch (f[0]) {
        case SOFTPLUS: {                 /* torch's beta = 1, threshold = 20 */
            double xi = v[f[2]];
            v[out] = xi > 20.0 ? xi : log1p(exp(xi));
            break;
        }
        case SUM4:                       /* Python's sum: ((((0 + a) + b) + c) + d) */
            v[out] = (((0.0 + v[f[2]]) + v[f[3]]) + v[f[4]]) + v[f[5]];
            break;
        case MUL:
            v[out] = v[f[2]] * v[f[3]];
            break;
        case SOFTMAX4: {
            double in[4], m, s = 0.0;
            for (int j = 0; j < 4; j++)
                in[j] = v[f[2 + j]];
            m = in[0];
            for (int j = 1; j < 4; j++)
                m = in[j] > m ? in[j] : m;
            for (int j = 0; j < 4; j++)
                s += exp(in[j] - m);
            for (int j = 0; j < 4; j++)
                v[out + j] = exp(in[j] - m) / s;
            break;
        }
        }
    }
    memset(g, 0, sizeof(double) * (size_t)slots);
    g[root] = 1.0;
    for (int32_t r = n - 1; r >= 0; r--) {
        const int32_t *f = rec + 6 * r;
        int32_t out = f[1];
        switch (f[0]) {
        case SOFTPLUS: {
            double xi = v[f[2]];
            if (xi > 20.0) {
                g[f[2]] += g[out];
            } else {
                double z = exp(xi);
                g[f[2]] += g[out] * z / (z + 1.0);
            }
            break;
        }
        case SUM4: {
            double go = g[out];
            g[f[2]] += go;
            g[f[3]] += go;
            g[f[4]] += go;
            g[f[5]] += go;
            break;
        }
        case MUL: {
            double go = g[out];
            g[f[2]] += go * v[f[3]];
            g[f[3]] += go * v[f[2]];
            break;
        }
        case SOFTMAX4: {
            double s = 0.0;
            for (int j = 0; j < 4; j++)
                s += g[out + j] * v[out + j];
            for (int j = 0; j < 4; j++)
                g[f[2 + j]] += v[out + j] * (g[out + j] - s);
            break;
        }
        }
    }
    return v[root];
}
