/* activation_ref.h — gpu.activation's inputs and its float64 CPU reference
 * of docs/kernels/activation.md (bias_gelu, bias_swiglu), with a tolerance
 * per element.
 *
 * A case is one shape in one dtype: its inputs are made here from a seed
 * (xorshift64*, so a failure reproduces), already rounded to the dtype and
 * never zero, and the reference reads exactly those stored values, so the
 * tolerance covers only what the kernel adds: fp32 arithmetic (the bias add,
 * tanhf / expf / __fdividef, the formulas' own cancellation) and the
 * rounding of the output to the dtype. */
#ifndef KILN_TESTS_GPU_ACTIVATION_REF_H
#define KILN_TESTS_GPU_ACTIVATION_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "kiln/ops.h" /* kiln_dtype */

typedef enum act_unit { ACT_GELU = 0, ACT_SWIGLU = 1 } act_unit;

typedef struct act_shape {
  act_unit unit;
  long long rows;
  int cols;     /* of y and dy; x, dx and bias have width = cols (gelu) or 2*cols (swiglu) */
  int bias;     /* 0: bias = NULL */
  int inplace;  /* gelu: y == x forward, dx == dy backward */
  int misalign; /* every tensor starts one element past a 16-byte boundary: the general path */
} act_shape;

typedef struct act_case {
  act_shape s;
  kiln_dtype dt;
  int width;               /* cols or 2 * cols */
  size_t n_out;            /* rows * cols: y, dy */
  size_t n_in;             /* rows * width: x, dx */
  void *x, *bias, *dy;     /* n_in, width (when s.bias), n_out elements of dt */
  double *y_ref, *y_tol;   /* n_out */
  double *dx_ref, *dx_tol; /* n_in */
} act_case;

/* Makes the inputs and both references; 0, or -1 when out of memory. */
int act_case_make(act_case *c, const act_shape *s, kiln_dtype dt, uint64_t seed);
void act_case_free(act_case *c);

/* Compares got (n elements of dt) with ref/tol: returns how many are out of
 * tolerance (NaN always is), the first at *first, and in *worst the largest
 * |got - ref| / tol. */
size_t act_check(kiln_dtype dt, const void *got, const double *ref, const double *tol, size_t n,
                 size_t *first, double *worst);

/* "gelu rows=3 cols=1001 bias in-place": the shape, for a case's line. */
const char *act_shape_str(const act_shape *s, char *out, size_t cap);

#endif
