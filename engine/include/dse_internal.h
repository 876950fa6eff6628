/* dse_internal.h — the engine internals that bench/ may read, in one documented place.
 *
 * The engine benchmarks measure the kernels against the memory bandwidth and write
 * synthetic model files, so they need more than dse.h: the kernel table and its
 * quantised-activation layout (kernels/kernels.h), a model's tensor directory
 * (model/model.h) and the native file format (model/format.h); and the switch of the
 * long-context attention split, to time a context with and without it. These are not a stable
 * API: they change with the engine, and a benchmark that uses them is rebuilt with it.
 *
 * Build with the `dse_internal` CMake target (bench/CMakeLists.txt), which puts
 * engine/src on the include path; tests/check-layering.sh rejects any other
 * engine/src header in bench/. */
#ifndef DSE_INTERNAL_H
#define DSE_INTERNAL_H

#include "dse.h"
#include "kernels/kernels.h"
#include "model/format.h"
#include "model/model.h"

/* Queries over more than `positions` cached positions take the split attention form
 * (engine/src/attend.c; 16 .. 512, the default), 0: never; for the split-vs-short test
 * and the depth benchmark. -EINVAL otherwise. */
int dse__session_set_attn_split(struct dse_session *s, int positions);

#endif
